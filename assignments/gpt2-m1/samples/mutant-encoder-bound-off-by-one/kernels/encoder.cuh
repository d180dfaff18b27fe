#ifndef ENCODER_CUH
#define ENCODER_CUH

#include "../utils/cuda_utils.cuh"

__global__ void mutant_encoder_bound_kernel(float* out, const int* inp, const float* wte,
                                            const float* wpe, int B, int T, int C) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    // BUG: the guard subtracts a whole row, so the last (b, t) row is never written.
    if (idx >= (long long)B * T * C - C) return;
    const long long bt = idx / C;
    const int c = (int)(idx % C);
    const int t = (int)(bt % T);
    const int ix = inp[bt];
    out[idx] = wte[(long long)ix * C + c] + wpe[(long long)t * C + c];
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    const int block_size = 256;
    const long long n = (long long)B * T * C;
    mutant_encoder_bound_kernel<<<(unsigned)CEIL_DIV(n, (long long)block_size), block_size>>>(
        out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
