#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 2, req_3: the reduction algorithm, as in layernorm.cuh. A block takes a row at a time:
// its threads each reduce a strided part of the row, then the block reduces those as a tree,
// within each warp by shuffles and across the warps through shared memory. Two reductions per
// row: its maximum (subtracted before exponentiating, for stability), then its sum of exponentials.

__device__ inline float softmax_warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}

__device__ inline float softmax_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// The maximum and the sum over the block, returned to every thread; `partials` holds one slot per
// warp. Every warp reduces the per-warp values itself, so the result needs no second barrier to be
// shared; the one after it keeps the next reduction from overwriting slots still being read.
__device__ inline float softmax_block_max(float value, float* partials) {
    value = softmax_warp_max(value);
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    int lane = threadIdx.x % 32;
    value = softmax_warp_max(lane < (int)(blockDim.x / 32) ? partials[lane] : -INFINITY);
    __syncthreads();
    return value;
}

__device__ inline float softmax_block_sum(float value, float* partials) {
    value = softmax_warp_sum(value);
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    int lane = threadIdx.x % 32;
    value = softmax_warp_sum(lane < (int)(blockDim.x / 32) ? partials[lane] : 0.0f);
    __syncthreads();
    return value;
}

// Causal softmax of scale * preatt over rows of length T; rows = B * NH * T, and row r is query
// t = r % T, which sees keys 0..t. Block b takes rows b, b + gridDim.x, ...: any grid covers every
// row (attention.cuh launches one block per 8 rows), and blockDim.x may be any multiple of 32 up to
// 1024. The masked part of att (keys > t) is written as zeros; the masked part of preatt is never
// read, so it may hold anything.
__global__ void softmax_forward_kernel(float* att, const float* preatt, float scale, int rows, int T) {
    __shared__ float partials[32];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {  // the same rows for every thread of the block
        int t = row % T;
        const float* x = preatt + (size_t)row * T;

        float max_value = -INFINITY;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) max_value = fmaxf(max_value, x[j] * scale);
        // Key 0 is always visible, so row_max is finite; threads that saw no key hold -inf.
        float row_max = softmax_block_max(max_value, partials);

        float sum = 0.0f;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(x[j] * scale - row_max);
        float inv_sum = 1.0f / softmax_block_sum(sum, partials);

        float* y = att + (size_t)row * T;
        for (int j = threadIdx.x; j < T; j += blockDim.x) y[j] = j <= t ? expf(x[j] * scale - row_max) * inv_sum : 0.0f;
    }
}

#endif  // SOFTMAX_CUH
