#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

// op_8, constant memory: layernorm's weight and bias, the same for every row, in __constant__ memory. They are
// copied there before each call (device to device, ordered on the stream like the kernel); GPT-2's C = 768 fits
// with room to spare, and a wider C than LAYERNORM_CONSTANT_MAX reads them from global memory as milestone 1 did.
// It shows the technique, not a speed-up: with one warp per row, the 32 lanes read 32 different channels at once,
// and the constant cache serves different addresses one after another (on an H200 this layernorm takes 6.5x
// milestone 1's time, benchmarks/RESULTS.md). A fast use reads one address per warp per step (a lane per row).
constexpr int LAYERNORM_CONSTANT_MAX = 4096;  // 2 x 16 KiB of the 64 KiB constant bank
__constant__ float layernorm_weight_constant[LAYERNORM_CONSTANT_MAX];
__constant__ float layernorm_bias_constant[LAYERNORM_CONSTANT_MAX];

__device__ inline float layernorm_warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// One warp per (b, t) row, two passes (mean, then the variance of x - mean), as milestone 1's.
template <bool kConstant>
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int rows, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;

    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = layernorm_warp_sum(sum) / C;

    float squares = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float diff = x[i] - m;
        squares += diff * diff;
    }
    float s = rsqrtf(layernorm_warp_sum(squares) / C + 1e-5f);

    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float w = kConstant ? layernorm_weight_constant[i] : weight[i];
        float b = kConstant ? layernorm_bias_constant[i] : bias[i];
        o[i] = (x[i] - m) * s * w + b;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    int rows = B * T;
    if (rows == 0) return;
    const int block_size = 256;
    const int rows_per_block = block_size / 32;
    if (C <= LAYERNORM_CONSTANT_MAX) {
        cudaCheck(cudaMemcpyToSymbolAsync(layernorm_weight_constant, weight, C * sizeof(float), 0,
                                          cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpyToSymbolAsync(layernorm_bias_constant, bias, C * sizeof(float), 0,
                                          cudaMemcpyDeviceToDevice));
        layernorm_forward_kernel<true><<<CEIL_DIV(rows, rows_per_block), block_size>>>(out, mean, rstd, inp, weight,
                                                                                       bias, rows, C);
    } else {
        layernorm_forward_kernel<false><<<CEIL_DIV(rows, rows_per_block), block_size>>>(out, mean, rstd, inp, weight,
                                                                                        bias, rows, C);
    }
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
