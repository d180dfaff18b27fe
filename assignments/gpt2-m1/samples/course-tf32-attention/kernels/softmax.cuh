#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

__device__ float warp_max(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
    }
    return val;
}

__device__ float warp_sum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val += __shfl_xor_sync(0xffffffff, val, offset);
    }
    return val;
}

// causal softmax of scale * preatt, one warp per row; row = (b, h, t) and keys 0..t are visible.
// the rest of the row is set to 0 because att @ v runs over the whole row on the tensor cores.
__global__ void softmax_causal_kernel(float* att, const float* preatt, float scale, int N, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    int t = row % T;
    const float* x = preatt + (long)row * T;
    float* y = att + (long)row * T;

    float maxval = -INFINITY;
    for (int j = lane; j <= t; j += 32) {
        maxval = fmaxf(maxval, x[j] * scale);
    }
    maxval = warp_max(maxval);

    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        sum += expf(x[j] * scale - maxval);
    }
    sum = warp_sum(sum);
    float inv_sum = 1.0f / sum;

    for (int j = lane; j < T; j += 32) {
        y[j] = (j <= t) ? expf(x[j] * scale - maxval) * inv_sum : 0.0f;
    }
}

#endif  // SOFTMAX_CUH
