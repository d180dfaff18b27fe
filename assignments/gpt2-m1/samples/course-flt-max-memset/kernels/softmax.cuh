#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

// one thread per row of att (B*NH*T rows of length T), causal: row i is query t = i % T.
// only att[.., 0..t] is touched, the future stays at the 0 that attention_forward memsets.
__global__ void softmax_forward_kernel(float* att, int N, int T) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        int t = i % T;
        float* x = att + i * T;
        float maxval = -FLT_MAX;
        for (int j = 0; j <= t; j++) {
            maxval = fmaxf(maxval, x[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j <= t; j++) {
            float e = expf(x[j] - maxval);
            x[j] = e;
            sum += e;
        }
        float norm = 1.0f / sum;
        for (int j = 0; j <= t; j++) {
            x[j] *= norm;
        }
    }
}

#endif  // SOFTMAX_CUH
