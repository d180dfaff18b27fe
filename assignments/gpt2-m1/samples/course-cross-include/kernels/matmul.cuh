#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// Naive batched matmul, one thread per output element. Written once and used twice: by
// matmul_forward below and by attention.cuh for q @ k^T and att @ v (instead of cuBLAS).
// For every z in the batch:
//   TRANS_B:  out[z] (M x N) = alpha * A[z] (M x K) @ B[z]^T   with B[z] stored N x K
//   !TRANS_B: out[z] (M x N) = alpha * A[z] (M x K) @ B[z]     with B[z] stored K x N
// then + bias[n] if bias != NULL. lda/ldb/ldo are row strides, strideA/B/O the batch strides.
template <bool TRANS_B>
__global__ void matmul_batched_kernel(float* out, const float* A, const float* Bm, const float* bias,
                                      int M, int N, int K, int lda, int ldb, int ldo,
                                      long strideA, long strideB, long strideO, float alpha) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z;
    if (m < M && n < N) {
        const float* a = A + z * strideA + (long)m * lda;
        const float* b = Bm + z * strideB;
        float val = 0.0f;
        for (int k = 0; k < K; k++) {
            float bk = TRANS_B ? b[(long)n * ldb + k] : b[(long)k * ldb + n];
            val += a[k] * bk;
        }
        val *= alpha;
        if (bias != NULL) {
            val += bias[n];
        }
        out[z * strideO + (long)m * ldo + n] = val;
    }
}

template <bool TRANS_B>
void matmul_batched(float* out, const float* A, const float* Bm, const float* bias, int M, int N, int K,
                    int lda, int ldb, int ldo, long strideA, long strideB, long strideO, int batch, float alpha) {
    const int sqrt_block_size = 16;
    dim3 block(sqrt_block_size, sqrt_block_size);
    dim3 grid(CEIL_DIV(N, sqrt_block_size), CEIL_DIV(M, sqrt_block_size), batch);
    matmul_batched_kernel<TRANS_B><<<grid, block>>>(out, A, Bm, bias, M, N, K, lda, ldb, ldo,
                                                    strideA, strideB, strideO, alpha);
    cudaCheck(cudaGetLastError());
}

// out (B*T, OC) = inp (B*T, C) @ weight (OC, C)^T + bias
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    matmul_batched<true>(out, inp, weight, bias, B * T, OC, C, C, C, OC, 0, 0, 0, 1, 1.0f);
}

#endif  // MATMUL_CUH
