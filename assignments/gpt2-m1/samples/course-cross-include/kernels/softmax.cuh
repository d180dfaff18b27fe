#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

// causal softmax, in place: N rows of length T, row i is query t = i % T and sees keys 0..t.
// one thread per row like softmax_forward_kernel1; the sum is kept in double to be safe.
__global__ void softmax_forward_kernel1(float* att, int N, int T) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        int t = i % T;
        float* x = att + (long)i * T;
        float maxval = -INFINITY;
        for (int j = 0; j <= t; j++) {
            if (x[j] > maxval) {
                maxval = x[j];
            }
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) {
            x[j] = expf(x[j] - maxval);
            sum += x[j];
        }
        for (int j = 0; j <= t; j++) {
            x[j] /= (float)sum;
        }
        // future tokens get probability 0 (att @ v multiplies the whole row)
        for (int j = t + 1; j < T; j++) {
            x[j] = 0.0f;
        }
    }
}

#endif  // SOFTMAX_CUH
