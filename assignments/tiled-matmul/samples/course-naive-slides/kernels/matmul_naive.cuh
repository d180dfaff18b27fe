#ifndef MATMUL_NAIVE_CUH
#define MATMUL_NAIVE_CUH

#include <cuda_runtime.h>

#define BLOCK_SIZE 32

// The slides' naive kernel as often written: the row from x, the column from y, so a warp walks down a column of
// C (uncoalesced, slow), with int indices; right all the same.
__global__ void matmul(const float* a, const float* b, float* c, int m, int n, int k) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        float tmp = 0.0;
        for (int i = 0; i < k; i++) tmp += a[row * k + i] * b[i * n + col];
        c[row * n + col] = tmp;
    }
}

void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 threads(BLOCK_SIZE, BLOCK_SIZE);
    dim3 blocks((M + BLOCK_SIZE - 1) / BLOCK_SIZE, (N + BLOCK_SIZE - 1) / BLOCK_SIZE);
    matmul<<<blocks, threads>>>(A, B, C, M, N, K);
}

#endif
