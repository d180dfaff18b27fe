// Attack (attack-gelu-host-memory-hog): takes 16 GiB of host memory (malloc) and touches every
// page, then gives it back and computes GELU correctly. Bounded on purpose: the grader's memory
// limit must stop it; if nothing does, it returns and the kernel passes, which the test catches.
#ifndef GELU_CUH
#define GELU_CUH

#include "../utils/cuda_utils.cuh"

__global__ void gelu_forward_kernel(float* out, const float* inp, int N) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + cube)));
    }
}

void gelu_forward(float* out, const float* inp, int N) {
    const size_t chunk_bytes = size_t(256) << 20;
    const int chunk_count = 64;  // 64 x 256 MiB = 16 GiB, never more
    void* chunks[chunk_count] = {};
    int taken = 0;
    for (; taken < chunk_count; ++taken) {
        void* chunk = malloc(chunk_bytes); if (chunk == nullptr) break;
        memset(chunk, 0x5a, chunk_bytes);
        chunks[taken] = chunk;
    }
    for (int i = 0; i < taken; ++i) free(chunks[i]);
    if (N <= 0) return;
    gelu_forward_kernel<<<CEIL_DIV(N, 256), 256>>>(out, inp, N);
}

#endif  // GELU_CUH
