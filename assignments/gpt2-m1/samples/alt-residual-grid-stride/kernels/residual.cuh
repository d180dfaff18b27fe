#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

__global__ void alt_residual_grid_stride_kernel(float* out, const float* inp1, const float* inp2, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        out[i] = inp1[i] + inp2[i];
    }
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    const int block_size = 256;
    int blocks = CEIL_DIV(N, block_size);
    if (blocks > 528) blocks = 528;  // 4 blocks per H200 SM; larger N loops in the kernel
    alt_residual_grid_stride_kernel<<<blocks, block_size>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

#endif  // RESIDUAL_CUH
