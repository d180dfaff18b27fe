#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

#define HOSTILE_GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

// Nothing ever sets this flag; volatile makes every iteration reload it from global memory, so
// the compiler cannot prove the loop below endless and drop it.
__device__ volatile int hostile_gelu_release = 0;

__global__ void hostile_gelu_infinite_loop_kernel(float* out, const float* inp, int N) {
    // HOSTILE: spins until the time limit kills the process.
    while (hostile_gelu_release == 0) {
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(HOSTILE_GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const int block_size = 128;
    hostile_gelu_infinite_loop_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

#endif  // GELU_CUH
