#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

// gelu_forward from train_gpt2.c (the tanh approximation GPT-2 uses), one thread per element
__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    const int grid_size = CEIL_DIV(N, block_size);
    gelu_forward_kernel<<<grid_size, block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
