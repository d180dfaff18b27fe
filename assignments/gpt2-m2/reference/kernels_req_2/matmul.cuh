#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 2, req_2: cuBLAS. cuBLAS is column-major, and a row-major (R, C) matrix is the same
// memory as a column-major (C, R) one, its transpose. So out = inp @ weight^T, row-major, is
// out^T = weight @ inp^T column-major: weight's memory, read column-major, is weight^T (C, OC),
// hence CUBLAS_OP_T; inp's is inp^T (C, B*T) as it is, hence CUBLAS_OP_N.

// The course's main program creates cublas_handle before any kernel runs (the grader's harness
// does the same); a program that did not gets one here, once.
inline cublasHandle_t matmul_cublas() {
    if (cublas_handle == nullptr) cublasCheck(cublasCreate(&cublas_handle));
    return cublas_handle;
}

// out (rows, OC) += bias, one thread per element; consecutive threads walk a row.
__global__ void matmul_add_bias_kernel(float* out, const float* bias, size_t elements, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < elements) out[idx] += bias[idx % OC];
}

// out (B*T, OC) = inp (B*T, C) @ weight (OC, C)^T + bias (NULL: none).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    const float one = 1.0f, zero = 0.0f;
    // m = OC, n = M, k = C; leading dimensions are the row lengths of the row-major arrays.
    cublasCheck(cublasSgemm(matmul_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, M, C, &one, weight, C, inp, C, &zero,
                            out, OC));
    if (bias != nullptr) {
        size_t elements = (size_t)M * OC;
        const int block_size = 256;
        matmul_add_bias_kernel<<<(unsigned)CEIL_DIV(elements, block_size), block_size>>>(out, bias, elements, OC);
        cudaCheck(cudaGetLastError());
    }
}

#endif  // MATMUL_CUH
