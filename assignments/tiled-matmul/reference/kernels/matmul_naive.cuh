#ifndef MATMUL_NAIVE_CUH
#define MATMUL_NAIVE_CUH

#include <cuda_runtime.h>

// The course slides' naive kernel: one thread per C[i][j], reading its row of A and its column of B straight
// from global memory, K times each. Consecutive threads (threadIdx.x) take consecutive columns j, so a warp's
// reads of B and writes of C are coalesced and its reads of A are one broadcast.
__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) sum += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    C[(size_t)i * N + j] = sum;
}

// C (M, N) = A (M, K) @ B (K, N), all row-major float32 on the device.
void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    matmul_naive_kernel<<<grid, block>>>(A, B, C, M, N, K);
}

#endif  // MATMUL_NAIVE_CUH
