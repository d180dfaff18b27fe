#ifndef ATTENTION_CUH
#define ATTENTION_CUH

// req_6, KV cache: milestone 1's attention when the cache is off; with it on, a prefill that stores every token's K
// and V before the full attention, then decode steps (T = 1) that store the new token's K and V at g_current_pos
// and attend from it over the cache alone. The course's template's control flow.

#include "../utils/cuda_utils.cuh"
#include "../kernels/softmax.cuh"
#include "../kernels/attention_baseline.cuh"

// The harness's state (the course's verify_kv_cache.cu defines them).
extern bool g_enable_kv_cache;
extern float* g_kv_cache;
extern int g_layer_idx;
extern bool g_is_prefill;
extern int g_current_pos;

constexpr int KV_LAYERS = 12;  // GPT-2 124M's, hard-coded as in the course's template
constexpr int KV_MAX_T = 1024;  // the position table's rows: no sequence is longer
constexpr int DECODE_THREADS = 512;
constexpr int DECODE_WARPS = DECODE_THREADS / 32;
constexpr int DECODE_MAX_HS = 64;  // GPT-2's head size; two channels per lane

// One big allocation, as the course's template's "Option 1": for each layer, K then V, each (B, KV_MAX_T, C).
static int kv_cache_batch = 0;  // the B it was sized for

__host__ __device__ inline size_t kv_offset(int layer, int kv, int b, int t, int B, int C) {
    return ((((size_t)layer * 2 + kv) * B + b) * KV_MAX_T + t) * C;
}

// K and V of inp's T tokens (B, T, 3C: q, k, v) into the layer's cache at positions start..start+T-1.
__global__ void store_kv_kernel(float* cache, const float* inp, int layer, int start, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = idx % C;
    int t = (idx / C) % T;
    int b = idx / ((size_t)C * T);
    const float* row = inp + ((size_t)b * T + t) * 3 * C;
    cache[kv_offset(layer, 0, b, start + t, B, C) + c] = row[C + c];
    cache[kv_offset(layer, 1, b, start + t, B, C) + c] = row[2 * C + c];
}

// The new token's attention over the cached positions 0..pos, one block per (head, row): a thread per key for the
// scores (in shared memory), a block-wide max and sum, then each warp a share of the keys for the weighted sum of V
// (its lanes along the channels), the warps' partial sums added at the end.
__global__ void __launch_bounds__(DECODE_THREADS)
decode_attention_kernel(float* out, const float* cache, const float* inp, int layer, int pos, int B, int C, int NH) {
    extern __shared__ float scores[];  // pos + 1
    __shared__ float q[DECODE_MAX_HS];
    __shared__ float reduce[DECODE_WARPS];
    __shared__ float partial[DECODE_WARPS][DECODE_MAX_HS];
    int h = blockIdx.x, b = blockIdx.y, HS = C / NH;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) q[d] = inp[(size_t)b * 3 * C + h * HS + d];
    __syncthreads();
    const float* keys = cache + kv_offset(layer, 0, b, 0, B, C) + h * HS;
    const float* values = cache + kv_offset(layer, 1, b, 0, B, C) + h * HS;
    float scale = 1.0f / sqrtf((float)HS);
    float local_max = -INFINITY;
    for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += q[d] * keys[(size_t)j * C + d];
        scores[j] = dot * scale;
        local_max = fmaxf(local_max, scores[j]);
    }
    local_max = softmax_warp_max(local_max);
    if (lane == 0) reduce[warp] = local_max;
    __syncthreads();
    float row_max = -INFINITY;
    for (int w = 0; w < DECODE_WARPS; w++) row_max = fmaxf(row_max, reduce[w]);
    __syncthreads();  // everyone has read the maxima before reduce holds the sums
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
        scores[j] = expf(scores[j] - row_max);
        local_sum += scores[j];
    }
    local_sum = softmax_warp_sum(local_sum);
    if (lane == 0) reduce[warp] = local_sum;
    __syncthreads();
    float row_sum = 0.0f;
    for (int w = 0; w < DECODE_WARPS; w++) row_sum += reduce[w];
    for (int d = lane; d < DECODE_MAX_HS; d += 32) {
        float acc = 0.0f;
        if (d < HS)
            for (int j = warp; j <= pos; j += DECODE_WARPS) acc += scores[j] * values[(size_t)j * C + d];
        partial[warp][d] = acc;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < DECODE_WARPS; w++) acc += partial[w][d];
        out[(size_t)b * C + h * HS + d] = acc / row_sum;
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    if (!g_enable_kv_cache) {
        attention_forward_baseline(out, qkvr, att, inp, B, T, C, NH);
        return;
    }
    if (g_kv_cache == nullptr || kv_cache_batch != B) {
        if (g_kv_cache != nullptr) cudaCheck(cudaFree(g_kv_cache));
        cudaCheck(cudaMalloc(&g_kv_cache, (size_t)KV_LAYERS * 2 * B * KV_MAX_T * C * sizeof(float)));
        kv_cache_batch = B;
    }
    const int block_size = 256;
    if (g_is_prefill) {
        // Stored first: the baseline overwrites inp with its scores.
        store_kv_kernel<<<CEIL_DIV((size_t)B * T * C, block_size), block_size>>>(g_kv_cache, inp, g_layer_idx, 0, B,
                                                                                   T, C);
        cudaCheck(cudaGetLastError());
        attention_forward_baseline(out, qkvr, att, inp, B, T, C, NH);
        if (++g_layer_idx == KV_LAYERS) {
            g_layer_idx = 0;
            g_is_prefill = false;
        }
        return;
    }
    int pos = g_current_pos;
    store_kv_kernel<<<CEIL_DIV((size_t)B * C, block_size), block_size>>>(g_kv_cache, inp, g_layer_idx, pos, B, 1, C);
    cudaCheck(cudaGetLastError());
    decode_attention_kernel<<<dim3(NH, B), DECODE_THREADS, (pos + 1) * sizeof(float)>>>(out, g_kv_cache, inp,
                                                                                         g_layer_idx, pos, B, C, NH);
    cudaCheck(cudaGetLastError());
    if (++g_layer_idx == KV_LAYERS) {
        g_layer_idx = 0;
        g_current_pos++;
    }
}

#endif  // ATTENTION_CUH
