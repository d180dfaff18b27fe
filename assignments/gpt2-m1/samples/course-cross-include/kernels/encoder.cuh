#ifndef ENCODER_CUH
#define ENCODER_CUH

#include "../utils/cuda_utils.cuh"

// one thread per element of out (B, T, C), so neighbouring threads read neighbouring floats
__global__ void encoder_forward_kernel2(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T * C;
    if (idx < N) {
        int bt = idx / C;
        int b = bt / T;
        int t = bt % T;
        int c = idx % C;
        int ix = inp[b * T + t];
        out[idx] = wte[ix * C + c] + wpe[t * C + c];
    }
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    const int N = B * T * C;
    const int block_size = 256;
    encoder_forward_kernel2<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
