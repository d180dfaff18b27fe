#ifndef ENCODER_CUH
#define ENCODER_CUH

#include "../utils/cuda_utils.cuh"

// encoder_forward from train_gpt2.c, one thread per (b,t) position instead of the two outer loops
// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
__global__ void encoder_forward_kernel1(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T;
    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        // seek to the output position in out[b,t,:]
        float* out_bt = out + b * T * C + t * C;
        // get the index of the token at inp[b, t]
        int ix = inp[b * T + t];
        // seek to the position in wte corresponding to the token
        const float* wte_ix = wte + ix * C;
        // seek to the position in wpe corresponding to the position
        const float* wpe_t = wpe + t * C;
        // add the two vectors and store the result in out[b,t,:]
        for (int i = 0; i < C; i++) {
            out_bt[i] = wte_ix[i] + wpe_t[i];
        }
    }
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    const int N = B * T;
    const int block_size = 128;
    const int grid_size = CEIL_DIV(N, block_size);
    encoder_forward_kernel1<<<grid_size, block_size>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
