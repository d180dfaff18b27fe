// Attack (attack-residual-unsynchronised-stream): work on another stream, never synchronised.
#ifndef RESIDUAL_CUH
#define RESIDUAL_CUH

#include "../utils/cuda_utils.cuh"

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int N) {
    // ~20 ms of spinning first, so that a reader that does not wait sees poison.
    long long start = clock64();
    while (clock64() - start < 40000000LL) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = inp1[i] + inp2[i];
}

void residual_forward(float* out, float* inp1, float* inp2, int N) {
    if (N <= 0) return;
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    residual_forward_kernel<<<CEIL_DIV(N, 256), 256, 0, side>>>(out, inp1, inp2, N);
    // No synchronisation, and the stream is leaked.
}

#endif  // RESIDUAL_CUH
