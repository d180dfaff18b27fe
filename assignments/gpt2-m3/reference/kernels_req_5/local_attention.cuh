#ifndef LOCAL_ATTENTION_CUH
#define LOCAL_ATTENTION_CUH

#include "../utils/cuda_utils.cuh"

// Local (windowed) causal attention, milestone 3's req_5: query t attends to keys max(0, t - 128) ... t, inclusive
// (129 keys at most), as the course's local_attention_forward_cpu does. Like it: permute inp's packed
// (B, T, 3, NH, HS) rows into q, k, v in qkvr, attend into inp (reused as scratch, (B, NH, T, HS)), and unpermute
// that into out (B, T, NH * HS).
#define LOCAL_WINDOW_SIZE 128

__global__ void local_attention_permute_kernel(float* q, float* k, float* v, const float* inp, int B, int T, int NH,
                                               int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS;
    size_t rest = idx / HS;
    int t = rest % T;
    rest /= T;
    int h = rest % NH;
    int b = rest / NH;
    size_t C = (size_t)NH * HS;
    size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    q[idx] = inp[src];
    k[idx] = inp[src + C];
    v[idx] = inp[src + 2 * C];
}

__global__ void local_attention_unpermute_kernel(float* out, const float* y, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS;
    size_t rest = idx / HS;
    int t = rest % T;
    rest /= T;
    int h = rest % NH;
    int b = rest / NH;
    out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = y[idx];
}

// The window's keys spread over a warp's lanes: lane l scores keys k_start + l, + 32, ... (KEYS_PER_LANE of them).
constexpr int LOCAL_KEYS_PER_LANE = (LOCAL_WINDOW_SIZE + 1 + 31) / 32;
constexpr int LOCAL_WARPS = 4;

// One warp per query row (b, h, t), two passes over the window held in registers: each lane scores its keys
// (a whole dot product each, the query row in shared memory), the warp takes the max and the sum of
// expf(score - max), then each lane sums p_j * v_j over the window for its own dimensions d = lane, lane + 32, ...
__global__ void local_attention_kernel(float* y, const float* q, const float* k, const float* v, int B, int T, int NH,
                                       int HS, float scale) {
    extern __shared__ float q_rows[];  // LOCAL_WARPS rows of HS floats
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * LOCAL_WARPS + warp;  // (b * NH + h) * T + t
    bool active = row < (size_t)B * NH * T;
    float* q_row = q_rows + warp * HS;
    if (active) {
        for (int d = lane; d < HS; d += 32) q_row[d] = q[row * HS + d];
    }
    __syncwarp();
    if (!active) return;
    int t = row % T;
    size_t head = row - t;  // the first row of this (b, h): keys and values t' are at (head + t') * HS
    int k_start = max(0, t - LOCAL_WINDOW_SIZE);
    int count = t - k_start + 1;  // inclusive of the query's own position

    float scores[LOCAL_KEYS_PER_LANE];
    float largest = -INFINITY;
#pragma unroll
    for (int i = 0; i < LOCAL_KEYS_PER_LANE; i++) {
        int j = i * 32 + lane;
        scores[i] = -INFINITY;
        if (j < count) {
            const float* k_row = k + (head + k_start + j) * HS;
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot += q_row[d] * k_row[d];
            scores[i] = dot * scale;
            largest = fmaxf(largest, scores[i]);
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) largest = fmaxf(largest, __shfl_xor_sync(0xffffffff, largest, offset));
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < LOCAL_KEYS_PER_LANE; i++) {
        scores[i] = i * 32 + lane < count ? expf(scores[i] - largest) : 0.0f;
        total += scores[i];
    }
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffff, total, offset);
    float inverse = 1.0f / total;

    for (int d0 = 0; d0 < HS; d0 += 32) {
        int d = d0 + lane;
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < LOCAL_KEYS_PER_LANE; i++) {
            for (int src = 0; src < 32; src++) {
                int j = i * 32 + src;
                if (j >= count) break;  // uniform across the warp: every lane has the same count
                float p = __shfl_sync(0xffffffff, scores[i], src);
                if (d < HS) acc += p * v[(head + k_start + j) * HS + d];
            }
        }
        if (d < HS) y[row * HS + d] = acc * inverse;
    }
}

void local_attention_forward_gpu(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS) {
    size_t n = (size_t)B * NH * T * HS;
    float *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n;
    int block = 256;
    local_attention_permute_kernel<<<CEIL_DIV(n, (size_t)block), block>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
    size_t rows = (size_t)B * NH * T;
    float scale = 1.0f / sqrtf((float)HS);
    local_attention_kernel<<<CEIL_DIV(rows, (size_t)LOCAL_WARPS), LOCAL_WARPS * 32, LOCAL_WARPS * HS * sizeof(float)>>>(
        inp, q, k, v, B, T, NH, HS, scale);  // inp is free once permuted: the attention's result goes there
    cudaCheck(cudaGetLastError());
    local_attention_unpermute_kernel<<<CEIL_DIV(n, (size_t)block), block>>>(out, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif  // LOCAL_ATTENTION_CUH
