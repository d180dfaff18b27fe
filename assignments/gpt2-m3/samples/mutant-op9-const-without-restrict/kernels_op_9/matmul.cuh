#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 1's matmul as the course teaches it: one thread per output, the K loop in 16-wide steps through two
// 16 x 16 tiles in shared memory (rows of inp, and rows of weight, which are out's columns). It is the baseline
// that milestone 2's optimizations are timed against: joint shared-memory and register tiling (req_0) and tensor
// cores (req_1) are theirs, not this one's.
constexpr int MATMUL_TILE = 16;

// op_9 (as one team wrote it): "the pointers are read-only", said with const pointers; no __restrict__.
// out (M, OC) = inp (M, C) @ weight (OC, C)^T + bias, where M = B * T.
__global__ void matmul_forward_kernel(float* const out, const float* const inp, const float* const weight,
                                      const float* const bias, int M, int C, int OC) {
    // A thread reads weight_tile down its own column of out: the +1 puts that column's rows in different banks.
    __shared__ float inp_tile[MATMUL_TILE][MATMUL_TILE];
    __shared__ float weight_tile[MATMUL_TILE][MATMUL_TILE + 1];
    int row = blockIdx.y * MATMUL_TILE + threadIdx.y;         // of inp and out
    int col = blockIdx.x * MATMUL_TILE + threadIdx.x;         // of out
    int weight_row = blockIdx.x * MATMUL_TILE + threadIdx.y;  // the row of weight this thread loads
    float sum = 0.0f;
    for (int k0 = 0; k0 < C; k0 += MATMUL_TILE) {
        // Consecutive threads load consecutive floats of a row (coalesced); past M, OC or C they load zero.
        int k = k0 + threadIdx.x;
        inp_tile[threadIdx.y][threadIdx.x] = (row < M && k < C) ? inp[(size_t)row * C + k] : 0.0f;
        weight_tile[threadIdx.y][threadIdx.x] = (weight_row < OC && k < C) ? weight[(size_t)weight_row * C + k] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < MATMUL_TILE; kk++) sum += inp_tile[threadIdx.y][kk] * weight_tile[threadIdx.x][kk];
        __syncthreads();  // the next tiles overwrite what every thread just read
    }
    if (row < M && col < OC) out[(size_t)row * OC + col] = sum + (bias != nullptr ? bias[col] : 0.0f);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(OC, MATMUL_TILE), CEIL_DIV(M, MATMUL_TILE));
    matmul_forward_kernel<<<grid, dim3(MATMUL_TILE, MATMUL_TILE)>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
