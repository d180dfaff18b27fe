#ifndef ENCODER_CUH
#define ENCODER_CUH

#include "../utils/cuda_utils.cuh"

// One thread per output element; consecutive threads walk the channels, so the reads of a
// wte/wpe row and the write of the out row are coalesced.
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    int c = idx % C;
    int t = bt % T;
    int token = inp[bt];
    out[idx] = wte[(size_t)token * C + c] + wpe[(size_t)t * C + c];
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    size_t N = (size_t)B * T * C;
    if (N == 0) return;
    const int block_size = 256;
    encoder_forward_kernel<<<(unsigned)CEIL_DIV(N, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
