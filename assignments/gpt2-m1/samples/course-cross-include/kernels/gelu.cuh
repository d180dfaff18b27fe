#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    gelu_forward_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
