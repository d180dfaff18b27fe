#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"
#include "softmax.cuh"

// step 1: preatt[b,h,t,t2] = q[b,t,h,:] . k[b,t2,h,:] * scale, one thread per element.
// stored directly in att; the future (t2 > t) gets -inf so the softmax turns it into 0.
__global__ void attention_query_key_kernel1(float* att, const float* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total_threads = B * NH * T * T;

    if (idx < total_threads) {
        int t2 = idx % T;
        int t = (idx / T) % T;
        int h = (idx / (T * T)) % NH;
        int b = idx / (NH * T * T);

        if (t2 > t) {
            // autoregressive mask
            att[idx] = -INFINITY;
            return;
        }

        int C3 = C * 3;
        int hs = C / NH;  // head size
        const float* query_t = inp + b * T * C3 + t * C3 + h * hs;
        const float* key_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C;  // +C because it's key

        // (q) . (k)
        float val = 0.0f;
        for (int i = 0; i < hs; i++) {
            val += query_t[i] * key_t2[i];
        }
        val *= 1.0 / sqrtf(hs);

        att[idx] = val;
    }
}

// step 3: out[b,t,h,i] = sum over t2 <= t of att[b,h,t,t2] * v[b,t2,h,i], one thread per output element
__global__ void attention_value_kernel1(float* out, const float* att, const float* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total_threads = B * T * C;

    if (idx < total_threads) {
        int hs = C / NH;
        int c = idx % C;
        int h = c / hs;
        int i = c % hs;
        int t = (idx / C) % T;
        int b = idx / (T * C);

        int C3 = C * 3;
        const float* att_bth = att + b * NH * T * T + h * T * T + t * T;
        float val = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* value_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C * 2;  // +C*2 because it's value
            val += att_bth[t2] * value_t2[i];
        }
        out[idx] = val;
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    const int block_size = 256;

    // preatt into att
    int total_threads = B * NH * T * T;
    int num_blocks = CEIL_DIV(total_threads, block_size);
    attention_query_key_kernel1<<<num_blocks, block_size>>>(att, inp, B, T, C, NH);
    cudaCheck(cudaGetLastError());

    // softmax of every row of att, in place, one block per row
    const int softmax_block_size = 128;
    size_t shared_mem_size = 2 * softmax_block_size / 32 * sizeof(float);
    softmax_forward_kernel4<<<B * NH * T, softmax_block_size, shared_mem_size>>>(att, B * NH * T, T);
    cudaCheck(cudaGetLastError());

    // att @ v
    total_threads = B * T * C;
    num_blocks = CEIL_DIV(total_threads, block_size);
    attention_value_kernel1<<<num_blocks, block_size>>>(out, att, inp, B, T, C, NH);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
