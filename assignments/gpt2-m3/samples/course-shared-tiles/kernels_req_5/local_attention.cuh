#ifndef LOCAL_ATTENTION_CUH
#define LOCAL_ATTENTION_CUH

#include "../utils/cuda_utils.cuh"

// A course-style tiled local attention under the other semester's name, local_attention_forward: a block takes 32
// query rows of one (b, h); the keys and values of their windows come through shared memory 32 rows at a time, and
// each thread keeps its row's running max, sum and output (online softmax). The result goes straight to out.
#define WINDOW_SIZE 128
#define TILE 32
#define MAX_HS 128

__global__ void qkv_split_kernel(float* q, float* k, float* v, const float* inp, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T * HS) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / HS / T) % NH, b = idx / HS / T / NH;
    int C = NH * HS;
    int src = (b * T + t) * 3 * C + h * HS + d;
    q[idx] = inp[src];
    k[idx] = inp[src + C];
    v[idx] = inp[src + 2 * C];
}

__global__ void local_attention_tiled_kernel(float* out, const float* q, const float* k, const float* v, int T, int NH,
                                             int HS) {
    __shared__ float ks[TILE][MAX_HS + 1];
    __shared__ float vs[TILE][MAX_HS + 1];
    int bh = blockIdx.y;
    int q0 = blockIdx.x * TILE;
    int t = q0 + threadIdx.x;
    const float* qb = q + (size_t)bh * T * HS;
    const float* kb = k + (size_t)bh * T * HS;
    const float* vb = v + (size_t)bh * T * HS;
    float qr[MAX_HS], acc[MAX_HS];
    for (int d = 0; d < HS; d++) {
        qr[d] = t < T ? qb[t * HS + d] : 0.0f;
        acc[d] = 0.0f;
    }
    float scale = 1.0f / sqrtf((float)HS);
    float m = -INFINITY, l = 0.0f;
    int first = max(0, q0 - WINDOW_SIZE);
    int last = min(T - 1, q0 + TILE - 1);
    for (int k0 = first; k0 <= last; k0 += TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < TILE * HS; i += blockDim.x) {
            int r = i / HS, d = i % HS;
            ks[r][d] = k0 + r < T ? kb[(k0 + r) * HS + d] : 0.0f;
            vs[r][d] = k0 + r < T ? vb[(k0 + r) * HS + d] : 0.0f;
        }
        __syncthreads();
        if (t >= T) continue;
        for (int r = 0; r < TILE; r++) {
            int j = k0 + r;
            if (j > t || j < t - WINDOW_SIZE) continue;
            float s = 0.0f;
            for (int d = 0; d < HS; d++) s += qr[d] * ks[r][d];
            s *= scale;
            float m_new = fmaxf(m, s);
            float correction = expf(m - m_new);
            float p = expf(s - m_new);
            l = l * correction + p;
            for (int d = 0; d < HS; d++) acc[d] = acc[d] * correction + p * vs[r][d];
            m = m_new;
        }
    }
    if (t >= T) return;
    int NHHS = NH * HS;
    int b = bh / NH, h = bh % NH;
    for (int d = 0; d < HS; d++) out[((size_t)b * T + t) * NHHS + h * HS + d] = acc[d] / l;
}

void local_attention_forward(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS) {
    int total = B * NH * T * HS;
    float *q = qkvr, *k = qkvr + total, *v = qkvr + 2 * total;
    qkv_split_kernel<<<CEIL_DIV(total, 256), 256>>>(q, k, v, inp, B, T, NH, HS);
    dim3 grid(CEIL_DIV(T, TILE), B * NH);
    local_attention_tiled_kernel<<<grid, TILE>>>(out, q, k, v, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif
