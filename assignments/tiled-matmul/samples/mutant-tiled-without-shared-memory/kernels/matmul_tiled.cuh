#ifndef MATMUL_TILED_CUH
#define MATMUL_TILED_CUH

#include <cuda_runtime.h>

// mutant-tiled-without-shared-memory: the naive kernel under the tiled signature. The block is tile x tile
// threads, as the tiled kernel's would be, but nothing is staged in __shared__ memory: every thread reads its
// row of A and column of B from global memory K times. Right in every case; not the technique.
__global__ void matmul_tiled_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) sum += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    C[(size_t)i * N + j] = sum;
}

void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    dim3 block(tile, tile);
    dim3 grid((N + tile - 1) / tile, (M + tile - 1) / tile);
    matmul_tiled_kernel<<<grid, block>>>(A, B, C, M, N, K);
}

#endif  // MATMUL_TILED_CUH
