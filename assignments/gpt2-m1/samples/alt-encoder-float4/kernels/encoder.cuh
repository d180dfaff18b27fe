#ifndef ENCODER_CUH
#define ENCODER_CUH

#include <cstdint>
#include "../utils/cuda_utils.cuh"

// One thread per 4 channels; only valid when C % 4 == 0 and every row start is 16-byte aligned.
__global__ void alt_encoder_float4_vec_kernel(float4* out, const int* inp, const float4* wte,
                                              const float4* wpe, int B, int T, int C4) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = (long long)B * T * C4;
    if (idx >= n4) return;
    const long long bt = idx / C4;
    const int c4 = (int)(idx % C4);
    const int t = (int)(bt % T);
    const int ix = inp[bt];
    const float4 e = wte[(long long)ix * C4 + c4];
    const float4 p = wpe[(long long)t * C4 + c4];
    out[idx] = make_float4(e.x + p.x, e.y + p.y, e.z + p.z, e.w + p.w);
}

// Scalar fallback for C % 4 != 0 (C = 771) or unaligned buffers.
__global__ void alt_encoder_float4_scalar_kernel(float* out, const int* inp, const float* wte,
                                                 const float* wpe, int B, int T, int C) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)B * T * C) return;
    const long long bt = idx / C;
    const int c = (int)(idx % C);
    const int t = (int)(bt % T);
    const int ix = inp[bt];
    out[idx] = wte[(long long)ix * C + c] + wpe[(long long)t * C + c];
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    const int block_size = 256;
    const bool aligned = (((uintptr_t)out | (uintptr_t)wte | (uintptr_t)wpe) % 16) == 0;
    if (C % 4 == 0 && aligned) {
        const int C4 = C / 4;
        const long long n4 = (long long)B * T * C4;
        alt_encoder_float4_vec_kernel<<<(unsigned)CEIL_DIV(n4, (long long)block_size), block_size>>>(
            (float4*)out, inp, (const float4*)wte, (const float4*)wpe, B, T, C4);
    } else {
        const long long n = (long long)B * T * C;
        alt_encoder_float4_scalar_kernel<<<(unsigned)CEIL_DIV(n, (long long)block_size), block_size>>>(
            out, inp, wte, wpe, B, T, C);
    }
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
