#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"
#include "softmax.cuh"

// attention_forward from train_gpt2.c with the three outer loops (b, t, h) turned into threads.
// inp is (B, T, 3C) holding the query, key, value vectors, att is (B, NH, T, T), out is (B, T, C).
// preatt has no buffer of its own in this signature, so the scores are written straight into att
// and the softmax turns them into probabilities in place.
__global__ void attention_forward_kernel1(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total_threads = B * T * NH;
    if (idx < total_threads) {
        int h = idx % NH;
        int t = (idx / NH) % T;
        int b = idx / (NH * T);

        int C3 = C * 3;
        int hs = C / NH;  // head size
        float scale = 1.0 / sqrtf(hs);

        const float* query_t = inp + b * T * C3 + t * C3 + h * hs;
        float* att_bth = att + b * NH * T * T + h * T * T + t * T;

        // pass 1: calculate query dot key and maxval
        float maxval = -FLT_MAX;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* key_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C;  // +C because it's key

            // (q) . (k)
            float val = 0.0f;
            for (int i = 0; i < hs; i++) {
                val += query_t[i] * key_t2[i];
            }
            val *= scale;
            if (val > maxval) {
                maxval = val;
            }

            att_bth[t2] = val;
        }

        // pass 2 + 3: exp, sum and normalize, for t2 <= t only (see softmax.cuh)
        softmax_row(att_bth, t + 1, T, maxval);

        // pass 4: accumulate weighted values into the output of attention
        // att is zero for t2 > t (the activations are memset to zero), so all of T can be summed
        float* out_bth = out + b * T * C + t * C + h * hs;
        for (int i = 0; i < hs; i++) {
            out_bth[i] = 0.0f;
        }
        for (int t2 = 0; t2 < T; t2++) {
            const float* value_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C * 2;  // +C*2 because it's value
            float att_btht2 = att_bth[t2];
            for (int i = 0; i < hs; i++) {
                out_bth[i] += att_btht2 * value_t2[i];
            }
        }
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    // qkvr is not needed: the kernel reads q, k, v straight out of inp
    const int block_size = 128;
    int total_threads = B * T * NH;
    int num_blocks = CEIL_DIV(total_threads, block_size);
    attention_forward_kernel1<<<num_blocks, block_size>>>(out, att, inp, B, T, C, NH);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
