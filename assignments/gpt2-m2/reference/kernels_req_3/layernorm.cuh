#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 2, req_3: the reduction algorithm. One block per (b, t) row: each thread sums a
// strided part of the row, then the block reduces those partial sums as a tree, in two levels:
// within each warp by shuffles (log2(32) steps, no shared memory, no barrier), then across the
// warps through shared memory. Two reductions per row (the mean, then the variance of x - mean):
// E[x^2] - mean^2 would cancel catastrophically on rows with a large mean and a small spread.
constexpr int LAYERNORM_BLOCK = 256;

__device__ inline float layernorm_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// The sum of `value` over the block, returned to every thread. `partials` holds one slot per warp
// (blockDim.x, a multiple of 32, at most 1024).
__device__ inline float layernorm_block_sum(float value, float* partials) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    value = layernorm_warp_sum(value);
    if (lane == 0) partials[warp] = value;
    __syncthreads();
    // Every warp reduces the per-warp sums itself, so no second barrier is needed to share the result...
    int warps = blockDim.x / 32;
    value = layernorm_warp_sum(lane < warps ? partials[lane] : 0.0f);
    // ...but one before `partials` is written again by the next reduction.
    __syncthreads();
    return value;
}

__global__ void __launch_bounds__(LAYERNORM_BLOCK)
layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int rows, int C) {
    __shared__ float partials[LAYERNORM_BLOCK / 32];
    int row = blockIdx.x;  // one block per row: the whole block leaves together or not at all
    if (row >= rows) return;
    const float* x = inp + (size_t)row * C;

    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += x[i];
    float m = layernorm_block_sum(sum, partials) / C;

    float squares = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float diff = x[i] - m;
        squares += diff * diff;
    }
    float s = rsqrtf(layernorm_block_sum(squares, partials) / C + 1e-5f);  // biased variance, as in PyTorch

    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = out + (size_t)row * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = (x[i] - m) * s * weight[i] + bias[i];
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    int rows = B * T;
    if (rows == 0) return;
    layernorm_forward_kernel<<<rows, LAYERNORM_BLOCK>>>(out, mean, rstd, inp, weight, bias, rows, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
