#ifndef MATMUL_CUBLAS_CUH
#define MATMUL_CUBLAS_CUH

#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

// The baseline to compare against: cuBLAS's SGEMM (its default math mode: FP32, no TF32). cuBLAS is
// column-major, and a row-major (R, C) matrix is the same memory as a column-major (C, R) one, its transpose:
// C = A @ B row-major is C^T = B^T @ A^T column-major, so B goes first, neither transposed, m = N and n = M.
inline cublasHandle_t matmul_cublas_handle() {
    static cublasHandle_t handle = nullptr;  // created once per process: creating one costs milliseconds
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "matmul_cublas: cublasCreate failed\n");
        abort();
    }
    return handle;
}

void matmul_cublas(const float* A, const float* B, float* C, int M, int N, int K) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t status = cublasSgemm(matmul_cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K,
                                        &zero, C, N);
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "matmul_cublas: cublasSgemm failed (status %d)\n", (int)status);
        abort();
    }
}

#endif  // MATMUL_CUBLAS_CUH
