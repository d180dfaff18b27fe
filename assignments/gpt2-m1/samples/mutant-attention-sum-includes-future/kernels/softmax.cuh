#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

// passes 2 and 3 of attention_forward in train_gpt2.c, for one row of att.
// x[0..len) holds the scaled scores, maxval is their max, T is the full row length.
// x is turned into the softmax in place.
__device__ void softmax_row(float* x, int len, int T, float maxval) {
    // pass 2: calculate the exp and keep track of sum
    // maxval is being calculated and subtracted only for numerical stability
    float expsum = 0.0f;
    for (int i = 0; i < T; i++) {
        float expv = expf(x[i] - maxval);
        expsum += expv;
        x[i] = expv;
    }
    float expsum_inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;

    // pass 3: normalize to get the softmax
    for (int i = 0; i < len; i++) {
        x[i] *= expsum_inv;
    }
}

#endif  // SOFTMAX_CUH
