#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"
#include "../kernels/softmax.cuh"

#define ALT_ATTENTION_ONLINE_WARPS 8

__device__ __forceinline__ float alt_attention_online_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp per query row (b, h, t). Lanes split the head dimension; keys are streamed in order
// with a running maximum m and running sum l (online softmax), so the T x T scores never exist.
// Per-warp shared memory holds the scaled query and the output accumulator (HS floats each);
// each lane only touches its own d, so no synchronisation beyond the shuffles is needed.
__global__ void alt_attention_online_kernel(float* out, const float* inp, int B, int T, int C, int NH) {
    extern __shared__ float alt_attention_online_smem[];
    const int HS = C / NH;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const long long row = (long long)blockIdx.x * ALT_ATTENTION_ONLINE_WARPS + warp;
    if (row >= (long long)B * NH * T) return;  // whole warps leave, so the shuffles stay full-warp
    const int t = (int)(row % T);
    const int h = (int)((row / T) % NH);
    const int b = (int)(row / ((long long)T * NH));
    const long long C3 = 3LL * C;
    const float scale = 1.0f / sqrtf((float)HS);

    float* q_s = alt_attention_online_smem + (long long)warp * 2 * HS;
    float* acc_s = q_s + HS;
    const float* q = inp + ((long long)b * T + t) * C3 + h * HS;
    for (int d = lane; d < HS; d += 32) {
        q_s[d] = q[d] * scale;
        acc_s[d] = 0.0f;
    }

    float m = -INFINITY;
    float l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const float* k = inp + ((long long)b * T + j) * C3 + C + h * HS;
        const float* v = k + C;
        float partial = 0.0f;
        for (int d = lane; d < HS; d += 32) partial += q_s[d] * k[d];
        const float s = alt_attention_online_warp_sum(partial);
        const float m_new = fmaxf(m, s);
        const float correction = expf(m - m_new);  // 0 on the first key, where m = -inf
        const float p = expf(s - m_new);
        l = l * correction + p;
        for (int d = lane; d < HS; d += 32) acc_s[d] = acc_s[d] * correction + p * v[d];
        m = m_new;
    }

    float* o = out + ((long long)b * T + t) * C + h * HS;
    const float inv_l = 1.0f / l;
    for (int d = lane; d < HS; d += 32) o[d] = acc_s[d] * inv_l;
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    (void)qkvr;  // reads q, k, v in place from inp
    (void)att;   // the online softmax never materialises the attention matrix; att is scratch
    const int HS = C / NH;
    const long long rows = (long long)B * NH * T;
    const size_t smem = (size_t)ALT_ATTENTION_ONLINE_WARPS * 2 * HS * sizeof(float);
    if (smem > 48 * 1024) {
        cudaCheck(cudaFuncSetAttribute(alt_attention_online_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    alt_attention_online_kernel<<<(unsigned)CEIL_DIV(rows, (long long)ALT_ATTENTION_ONLINE_WARPS),
                                  ALT_ATTENTION_ONLINE_WARPS * 32, smem>>>(out, inp, B, T, C, NH);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
