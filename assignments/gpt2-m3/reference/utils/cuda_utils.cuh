// Provided by the course; the grader always uses this copy, never a submission's.
// Written to be compatible with the course's own utils/cuda_utils.cuh: the same includes and the
// same declarations, so that a kernel file compiles here exactly when it compiles in the course's
// build (FLT_MAX from <float.h>, memset from <string.h>, cublas_handle and cublas_compute_type).
#ifndef CUDA_UTILS_CUH
#define CUDA_UTILS_CUH

#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#include <string.h>
#include <math.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))

inline void cuda_check(cudaError_t error, const char* file, int line) {
    if (error != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))

// cuBLAS is optional on a grading machine: without its headers, kernels that do not use it still
// build, and a kernel that does fails to compile with a message naming cublas_v2.h.
#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define KG_HAVE_CUBLAS 1
inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR]: %d %s %d\n", status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) (cublas_check((status), __FILE__, __LINE__))
// As in the course's program, the handle is created before any kernel runs: the grader's harness
// creates it (only for a library that links cuBLAS) and stores it here, hence the plain global.
// Each kernel is its own translation unit and library, so one definition per library is right.
cublasHandle_t cublas_handle = nullptr;
[[maybe_unused]] static cublasComputeType_t cublas_compute_type = CUBLAS_COMPUTE_32F;
#endif

#endif  // CUDA_UTILS_CUH
