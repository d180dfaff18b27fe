#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

#define MUTANT_MATMUL_TILE_RACE_TILE 32

// Classic shared-memory tiling, one thread per output, with the next K-tile prefetched into
// registers while the current one is multiplied. The +1 pads the rows off the bank stride.
// BUG: the __syncthreads() at the end of the K loop is missing, so a warp that finishes early
// (or skips the multiply because its row is past M) stores the next tile over the one that
// other warps are still reading.
__global__ void mutant_matmul_tile_race_kernel(float* out, const float* inp, const float* weight, const float* bias,
                                               int M, int C, int OC) {
    __shared__ float a_tile[MUTANT_MATMUL_TILE_RACE_TILE][MUTANT_MATMUL_TILE_RACE_TILE + 1];  // [m][k]
    __shared__ float w_tile[MUTANT_MATMUL_TILE_RACE_TILE][MUTANT_MATMUL_TILE_RACE_TILE + 1];  // [o][k]
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int m0 = blockIdx.y * MUTANT_MATMUL_TILE_RACE_TILE;
    const int o0 = blockIdx.x * MUTANT_MATMUL_TILE_RACE_TILE;
    const int m = m0 + ty;  // this thread's output is out[m, o]
    const int o = o0 + tx;
    const int w_row = o0 + ty;  // the weight row this thread loads; it loads inp row m

    float a_next = (m < M && tx < C) ? inp[(long long)m * C + tx] : 0.0f;
    float w_next = (w_row < OC && tx < C) ? weight[(long long)w_row * C + tx] : 0.0f;
    float acc = 0.0f;
    for (int k0 = 0; k0 < C; k0 += MUTANT_MATMUL_TILE_RACE_TILE) {
        a_tile[ty][tx] = a_next;
        w_tile[ty][tx] = w_next;
        __syncthreads();
        const int k_next = k0 + MUTANT_MATMUL_TILE_RACE_TILE + tx;
        if (k0 + MUTANT_MATMUL_TILE_RACE_TILE < C) {
            a_next = (m < M && k_next < C) ? inp[(long long)m * C + k_next] : 0.0f;
            w_next = (w_row < OC && k_next < C) ? weight[(long long)w_row * C + k_next] : 0.0f;
        }
        if (m < M && o < OC) {
            for (int k = 0; k < MUTANT_MATMUL_TILE_RACE_TILE; k++) acc += a_tile[ty][k] * w_tile[tx][k];
        }
        // (missing: __syncthreads();)
    }
    if (m < M && o < OC) out[(long long)m * OC + o] = acc + (bias != NULL ? bias[o] : 0.0f);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    const int M = B * T;
    const dim3 block(MUTANT_MATMUL_TILE_RACE_TILE, MUTANT_MATMUL_TILE_RACE_TILE);
    const dim3 grid(CEIL_DIV(OC, MUTANT_MATMUL_TILE_RACE_TILE), CEIL_DIV(M, MUTANT_MATMUL_TILE_RACE_TILE));
    mutant_matmul_tile_race_kernel<<<grid, block>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
