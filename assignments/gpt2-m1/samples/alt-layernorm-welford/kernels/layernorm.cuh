#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

#define ALT_LAYERNORM_WELFORD_THREADS 256

// Chan et al.: merges (n_b, mean_b, m2_b) into (n_a, mean_a, m2_a); empty sides are skipped.
__device__ __forceinline__ void alt_layernorm_welford_merge(float& n_a, float& mean_a, float& m2_a,
                                                            float n_b, float mean_b, float m2_b) {
    if (n_b == 0.0f) return;
    const float n = n_a + n_b;
    const float delta = mean_b - mean_a;
    mean_a += delta * (n_b / n);
    m2_a += m2_b + delta * delta * (n_a * n_b / n);
    n_a = n;
}

// One block per row: each thread runs Welford over its strided channels, then a shared-memory tree merges.
__global__ void alt_layernorm_welford_kernel(float* out, float* mean, float* rstd, const float* inp,
                                             const float* weight, const float* bias, int C) {
    __shared__ float s_n[ALT_LAYERNORM_WELFORD_THREADS];
    __shared__ float s_mean[ALT_LAYERNORM_WELFORD_THREADS];
    __shared__ float s_m2[ALT_LAYERNORM_WELFORD_THREADS];
    const int tid = threadIdx.x;
    const long long row = blockIdx.x;
    const float* x = inp + row * C;

    float n = 0.0f, mu = 0.0f, m2 = 0.0f;
    for (int c = tid; c < C; c += blockDim.x) {
        n += 1.0f;
        const float delta = x[c] - mu;
        mu += delta / n;
        m2 += delta * (x[c] - mu);
    }
    s_n[tid] = n;
    s_mean[tid] = mu;
    s_m2[tid] = m2;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            float na = s_n[tid], ma = s_mean[tid], qa = s_m2[tid];
            alt_layernorm_welford_merge(na, ma, qa, s_n[tid + stride], s_mean[tid + stride], s_m2[tid + stride]);
            s_n[tid] = na;
            s_mean[tid] = ma;
            s_m2[tid] = qa;
        }
        __syncthreads();
    }
    const float m = s_mean[0];
    const float s = 1.0f / sqrtf(s_m2[0] / C + 1e-5f);  // biased variance, as in GPT-2

    float* o = out + row * C;
    for (int c = tid; c < C; c += blockDim.x) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (tid == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    const int N = B * T;
    alt_layernorm_welford_kernel<<<N, ALT_LAYERNORM_WELFORD_THREADS>>>(out, mean, rstd, inp, weight, bias, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
