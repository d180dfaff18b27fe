#ifndef MATMUL_CUBLAS_CUH
#define MATMUL_CUBLAS_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

// C (M, N) = A (M, K) @ B (K, N), row-major float32 on the device, computed by cuBLAS (cublasSgemm): the baseline
// your kernels are compared with. cuBLAS is column-major: think of what a row-major matrix is when read
// column-major. The only file where cuBLAS is allowed.
void matmul_cublas(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: one cublasSgemm call, with a cublasHandle_t created once (not once per call).
}

#endif  // MATMUL_CUBLAS_CUH
