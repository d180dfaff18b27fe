#ifndef MATMUL_NAIVE_CUH
#define MATMUL_NAIVE_CUH

#include <cuda_runtime.h>

__global__ void matmul_naive_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: the course slides' naive kernel. Each thread computes one C[i][j] = sum over k of A[i][k] * B[k][j],
    // reading A and B straight from global memory. All matrices are row-major: A[i][k] is A[i * K + k].
    // Guard the store: M and N need not be multiples of your block's edge.
}

// C (M, N) = A (M, K) @ B (K, N), all row-major float32 on the device.
void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: launch matmul_naive_kernel on a 2D grid of 2D blocks covering the M x N outputs.
}

#endif  // MATMUL_NAIVE_CUH
