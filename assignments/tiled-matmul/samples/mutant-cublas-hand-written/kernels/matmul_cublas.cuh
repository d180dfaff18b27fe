#ifndef MATMUL_CUBLAS_CUH
#define MATMUL_CUBLAS_CUH

#include <cuda_runtime.h>

// mutant-cublas-hand-written: the "cuBLAS" baseline written by hand (the naive kernel again), so the comparison
// with cuBLAS compares the student's kernel with itself. Right in every case; calls nothing in cuBLAS.
__global__ void matmul_by_hand_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N) return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) sum += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    C[(size_t)i * N + j] = sum;
}

void matmul_cublas(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(16, 16);
    matmul_by_hand_kernel<<<dim3((N + 15) / 16, (M + 15) / 16), block>>>(A, B, C, M, N, K);
}

#endif  // MATMUL_CUBLAS_CUH
