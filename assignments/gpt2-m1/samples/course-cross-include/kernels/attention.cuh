#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"
#include "./matmul.cuh"  // matmul_batched
#include "softmax.cuh"

// No permute: the strides of matmul_batched pick q, k, v for head h straight out of inp, which is
// (B, T, 3C) with row stride 3C, and the heads are the batch (batch stride HS).
void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);

    for (int b = 0; b < B; b++) {
        const float* q = inp + (long)b * T * C3;
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* att_b = att + (long)b * NH * T * T;
        // preatt[h] (T x T) = scale * q[h] (T x HS) @ k[h]^T, written into att
        matmul_batched<true>(att_b, q, k, NULL, T, T, HS, C3, C3, T, HS, HS, (long)T * T, NH, scale);
        // softmax over each row, future masked
        softmax_forward_kernel1<<<CEIL_DIV(NH * T, 128), 128>>>(att_b, NH * T, T);
        cudaCheck(cudaGetLastError());
        // out[b, :, h*HS:(h+1)*HS] (T x HS) = att[h] (T x T) @ v[h] (T x HS), straight into out's layout
        matmul_batched<false>(out + (long)b * T * C, att_b, v, NULL, T, HS, T, T, C3, C, (long)T * T, HS, HS, NH, 1.0f);
    }
}

#endif  // ATTENTION_CUH
