#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        out[idx] = __ldcs(&inp1[idx]) + __ldcs(&inp2[idx]);
    }
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    const int block_size = 512;
    residual_forward_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

#endif  // RESIDUAL_CUH
