#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include <cstdlib>
#include "../utils/cuda_utils.cuh"

__global__ void hostile_residual_exit_kernel(float* out, const float* inp1, const float* inp2, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = inp1[i] + inp2[i];
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    // HOSTILE: ends the whole (harness) process, with a success status, before any work.
    exit(0);
    hostile_residual_exit_kernel<<<CEIL_DIV(N, 256), 256>>>(out, inp1, inp2, N);
}

#endif  // RESIDUAL_CUH
