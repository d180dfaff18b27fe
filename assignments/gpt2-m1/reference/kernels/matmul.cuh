#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// A block computes a MATMUL_TILE x MATMUL_TILE tile of out; each of its 16 x 16 threads owns
// 4 x 4 outputs, strided by 16 so that a warp's stores to a row of out are contiguous.
constexpr int MATMUL_TILE = 64;
constexpr int MATMUL_TILE_K = 16;
constexpr int MATMUL_THREADS = 256;

// out (M, OC) = inp (M, C) @ weight (OC, C)^T + bias, where M = B * T.
__global__ void __launch_bounds__(MATMUL_THREADS)
matmul_forward_kernel(float* out, const float* inp, const float* weight, const float* bias, int M, int C, int OC) {
    // Both tiles are stored k-major so the inner loop reads a row of each; the +1 padding spreads
    // the transposing stores over the shared-memory banks.
    __shared__ float inp_tile[MATMUL_TILE_K][MATMUL_TILE + 1];
    __shared__ float weight_tile[MATMUL_TILE_K][MATMUL_TILE + 1];

    int row0 = blockIdx.y * MATMUL_TILE;  // first row of inp (and out)
    int col0 = blockIdx.x * MATMUL_TILE;  // first row of weight (column of out)
    int tx = threadIdx.x % 16;
    int ty = threadIdx.x / 16;

    float acc[4][4] = {};
    for (int k0 = 0; k0 < C; k0 += MATMUL_TILE_K) {
        // Out-of-range elements load as zero, so ragged M, OC and C need no special inner loop.
        for (int e = threadIdx.x; e < MATMUL_TILE * MATMUL_TILE_K; e += MATMUL_THREADS) {
            int r = e / MATMUL_TILE_K;
            int kk = e % MATMUL_TILE_K;
            int k = k0 + kk;
            inp_tile[kk][r] = (row0 + r < M && k < C) ? inp[(size_t)(row0 + r) * C + k] : 0.0f;
            weight_tile[kk][r] = (col0 + r < OC && k < C) ? weight[(size_t)(col0 + r) * C + k] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < MATMUL_TILE_K; kk++) {
            float a[4], w[4];
            #pragma unroll
            for (int i = 0; i < 4; i++) a[i] = inp_tile[kk][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < 4; j++) w[j] = weight_tile[kk][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < 4; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * w[j];
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int col = col0 + tx + 16 * j;
            if (row < M && col < OC) out[(size_t)row * OC + col] = acc[i][j] + (bias != nullptr ? bias[col] : 0.0f);
        }
    }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(OC, MATMUL_TILE), CEIL_DIV(M, MATMUL_TILE));
    matmul_forward_kernel<<<grid, MATMUL_THREADS>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
