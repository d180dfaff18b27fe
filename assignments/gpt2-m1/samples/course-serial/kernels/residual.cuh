#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

// residual_forward from train_gpt2.c: out = inp1 + inp2, one thread per element
__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        out[idx] = inp1[idx] + inp2[idx];
    }
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    const int block_size = 256;
    const int grid_size = CEIL_DIV(N, block_size);
    residual_forward_kernel<<<grid_size, block_size>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

#endif  // RESIDUAL_CUH
