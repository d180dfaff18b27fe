#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int N) {
    // TODO: out[i] = inp1[i] + inp2[i] for every i < N.
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    // TODO: launch residual_forward_kernel with enough blocks to cover N elements, then check the
    // launch with cudaCheck(cudaGetLastError()).
}

#endif  // RESIDUAL_CUH
