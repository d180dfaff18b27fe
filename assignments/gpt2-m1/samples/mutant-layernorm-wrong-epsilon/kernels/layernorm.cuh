#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

__device__ __forceinline__ float mutant_layernorm_wrong_epsilon_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp per (b, t) row.
// BUG: epsilon is 1e-3 where GPT-2 uses 1e-5.
__global__ void mutant_layernorm_wrong_epsilon_kernel(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (row >= N) return;
    const float* x = inp + row * C;

    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += x[c];
    const float m = mutant_layernorm_wrong_epsilon_warp_sum(sum) / C;

    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = x[c] - m;
        sq += d * d;
    }
    const float s = 1.0f / sqrtf(mutant_layernorm_wrong_epsilon_warp_sum(sq) / C + 1e-3f);

    float* o = out + row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    const int block_size = 256;
    const int N = B * T;
    mutant_layernorm_wrong_epsilon_kernel<<<CEIL_DIV(N * 32, block_size), block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
