#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define MUTANT_GELU_WRONG_CONSTANT_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// BUG: the cubic coefficient is 0.04; GPT-2's tanh approximation uses 0.044715.
__global__ void mutant_gelu_wrong_constant_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(MUTANT_GELU_WRONG_CONSTANT_SCALING_FACTOR * (x + 0.04f * x * x * x)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    mutant_gelu_wrong_constant_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
