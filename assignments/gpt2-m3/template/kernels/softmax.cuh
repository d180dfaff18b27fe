#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

__global__ void softmax_forward_kernel(float* att, const float* preatt, float scale, int rows, int T) {
    // TODO: causal softmax of scale * preatt over rows of length T (rows = B * NH * T). Row r is
    // query t = r % T and sees keys 0..t only: subtract the row's maximum before exponentiating
    // (for stability), normalise over keys 0..t, and write 0 to att for keys after t.
}

#endif  // SOFTMAX_CUH
