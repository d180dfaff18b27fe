#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

// GPT-2 uses the tanh approximation of GELU, not the exact erf form.
__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + cube)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    if (N <= 0) return;
    const int block_size = 256;
    gelu_forward_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
