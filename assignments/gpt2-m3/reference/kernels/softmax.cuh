#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

__device__ inline float softmax_warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}

__device__ inline float softmax_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// Causal softmax of scale * preatt over rows of length T; rows = B * NH * T, and row r is query
// t = r % T, which sees keys 0..t. One warp per row. An online max and sum read the row once
// before the write pass; the masked part of att (keys > t) is written as zeros, and the masked
// part of preatt is never read, so it may hold anything.
__global__ void softmax_forward_kernel(float* att, const float* preatt, float scale, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-warp
    int t = row % T;
    const float* x = preatt + (size_t)row * T;

    float max_value = -INFINITY;
    float sum = 0.0f;  // sum of exp(value - max_value) over this lane's keys
    for (int j = lane; j <= t; j += 32) {
        float value = x[j] * scale;
        float new_max = fmaxf(max_value, value);
        sum = sum * expf(max_value - new_max) + expf(value - new_max);
        max_value = new_max;
    }
    // Key 0 is always visible, so row_max is finite; lanes that saw no key contribute exp(-inf) = 0.
    float row_max = softmax_warp_max(max_value);
    float row_sum = softmax_warp_sum(sum * expf(max_value - row_max));
    float inv_sum = 1.0f / row_sum;

    float* y = att + (size_t)row * T;
    for (int j = lane; j < T; j += 32) y[j] = j <= t ? expf(x[j] * scale - row_max) * inv_sum : 0.0f;
}

#endif  // SOFTMAX_CUH
