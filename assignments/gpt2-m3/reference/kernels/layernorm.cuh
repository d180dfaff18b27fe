#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

__device__ inline float layernorm_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// One warp per (b, t) row. Two passes (mean, then the variance of x - mean) because
// E[x^2] - mean^2 cancels catastrophically on rows with a large mean and a small spread.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int rows, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-warp

    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = layernorm_warp_sum(sum) / C;

    float squares = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float diff = x[i] - m;
        squares += diff * diff;
    }
    float s = rsqrtf(layernorm_warp_sum(squares) / C + 1e-5f);  // biased variance, as in PyTorch

    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * s * weight[i] + bias[i];
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    int rows = B * T;
    if (rows == 0) return;
    const int block_size = 256;
    const int rows_per_block = block_size / 32;
    layernorm_forward_kernel<<<CEIL_DIV(rows, rows_per_block), block_size>>>(out, mean, rstd, inp, weight, bias,
                                                                             rows, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
