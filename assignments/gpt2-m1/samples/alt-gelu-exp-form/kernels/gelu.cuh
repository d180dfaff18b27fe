#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define ALT_GELU_EXP_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u) == x / (1 + exp(-2u)). For x -> -inf, exp overflows
// to inf and the quotient is -0, as the tanh form gives.
__global__ void alt_gelu_exp_form_kernel(float* out, const float* inp, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float x = inp[i];
        const float u = ALT_GELU_EXP_SCALING_FACTOR * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    alt_gelu_exp_form_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
