#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define MUTANT_GELU_MISSING_HALF_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// BUG: the leading factor 0.5 is missing, so the result is twice GELU.
__global__ void mutant_gelu_missing_half_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float x = inp[i];
        out[i] = x * (1.0f + tanhf(MUTANT_GELU_MISSING_HALF_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    mutant_gelu_missing_half_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
