// Attack (attack-residual-mutates-inputs): right answer, then its input is scribbled over.
#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

__global__ void residual_forward_kernel(float* out, float* inp1, const float* inp2, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        out[i] = inp1[i] + inp2[i];
        inp1[i] = 0.0f;
    }
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    if (N <= 0) return;
    residual_forward_kernel<<<CEIL_DIV(N, 256), 256>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

#endif  // RESIDUAL_CUH
