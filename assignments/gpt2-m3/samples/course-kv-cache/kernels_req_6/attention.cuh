#ifndef ATTENTION_CUH
#define ATTENTION_CUH

// A KV cache as the course's kernels/attention_kv_cache_template.cuh lays it out, its control flow followed
// literally: the baseline when the cache is off; "Option 1: Allocate a very big kv cache" when g_kv_cache is nullptr;
// prefill: store K/V, the baseline, g_layer_idx++ (at 12: reset, g_is_prefill = false); decode: store one token at
// g_current_pos, decode attention, g_layer_idx++ (at 12: reset, g_current_pos++). Its decode attention is three
// plain kernels: a thread per (row, head, key) for the scores, a warp per (row, head) for the softmax (softmax.cuh's
// pattern), a thread per output channel for the weighted sum.

#include "../utils/cuda_utils.cuh"
#include "../kernels/softmax.cuh"
#include "../kernels/attention_baseline.cuh"

extern bool g_enable_kv_cache;
extern float* g_kv_cache;
extern int g_layer_idx;
extern bool g_is_prefill;
extern int g_current_pos;

#define NUM_LAYERS 12
#define MAX_SEQ_LEN 1024

// cache layout: [layer][k or v][b][t][c], then the scores scratch [b][h][t]
__global__ void store_kv_kernel(float* kv_cache, float* inp, int layer, int start_pos, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * C) {
        int c = idx % C;
        int t = (idx / C) % T;
        int b = idx / (C * T);
        float* k_cache = kv_cache + (size_t)(layer * 2 + 0) * B * MAX_SEQ_LEN * C;
        float* v_cache = kv_cache + (size_t)(layer * 2 + 1) * B * MAX_SEQ_LEN * C;
        k_cache[(size_t)(b * MAX_SEQ_LEN + start_pos + t) * C + c] = inp[(b * T + t) * 3 * C + C + c];
        v_cache[(size_t)(b * MAX_SEQ_LEN + start_pos + t) * C + c] = inp[(b * T + t) * 3 * C + 2 * C + c];
    }
}

__global__ void decode_scores_kernel(float* scores, float* kv_cache, float* inp, int layer, int len, int B, int C,
                                     int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * len) {
        int j = idx % len;
        int h = (idx / len) % NH;
        int b = idx / (len * NH);
        int hs = C / NH;
        float* k_cache = kv_cache + (size_t)(layer * 2 + 0) * B * MAX_SEQ_LEN * C;
        float* q = inp + b * 3 * C + h * hs;
        float* k = k_cache + (size_t)(b * MAX_SEQ_LEN + j) * C + h * hs;
        float val = 0.0f;
        for (int i = 0; i < hs; i++) val += q[i] * k[i];
        scores[(b * NH + h) * MAX_SEQ_LEN + j] = val * (1.0f / sqrtf((float)hs));
    }
}

// one warp per (b, h) row, as softmax.cuh's kernel does it
__global__ void decode_softmax_kernel(float* scores, int len, int B, int NH) {
    int row_idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row_idx >= B * NH) return;
    float* row = scores + row_idx * MAX_SEQ_LEN;
    float maxval = -FLT_MAX;
    for (int j = lane; j < len; j += 32) maxval = fmaxf(maxval, row[j]);
    maxval = softmax_warp_max(maxval);
    float sum = 0.0f;
    for (int j = lane; j < len; j += 32) {
        row[j] = expf(row[j] - maxval);
        sum += row[j];
    }
    sum = softmax_warp_sum(sum);
    for (int j = lane; j < len; j += 32) row[j] /= sum;
}

__global__ void decode_values_kernel(float* out, float* scores, float* kv_cache, int layer, int len, int B, int C,
                                     int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * C) {
        int c = idx % C;
        int b = idx / C;
        int h = c / (C / NH);
        float* v_cache = kv_cache + (size_t)(layer * 2 + 1) * B * MAX_SEQ_LEN * C;
        float* row = scores + (b * NH + h) * MAX_SEQ_LEN;
        float val = 0.0f;
        for (int j = 0; j < len; j++) val += row[j] * v_cache[(size_t)(b * MAX_SEQ_LEN + j) * C + c];
        out[b * C + c] = val;
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    if (!g_enable_kv_cache) {
        attention_forward_baseline(out, qkvr, att, inp, B, T, C, NH);
        return;
    }
    // Option 1: Allocate a very big kv cache
    if (g_kv_cache == nullptr) {
        size_t cache_size = (size_t)NUM_LAYERS * 2 * B * MAX_SEQ_LEN * C + (size_t)B * NH * MAX_SEQ_LEN;
        cudaCheck(cudaMalloc(&g_kv_cache, cache_size * sizeof(float)));
    }
    float* scores = g_kv_cache + (size_t)NUM_LAYERS * 2 * B * MAX_SEQ_LEN * C;
    int block_size = 256;
    if (g_is_prefill) {
        store_kv_kernel<<<CEIL_DIV(B * T * C, block_size), block_size>>>(g_kv_cache, inp, g_layer_idx, 0, B, T, C);
        cudaCheck(cudaGetLastError());
        attention_forward_baseline(out, qkvr, att, inp, B, T, C, NH);
        g_layer_idx++;
        if (g_layer_idx == NUM_LAYERS) {
            g_layer_idx = 0;
            g_is_prefill = false;
        }
    } else {
        int len = g_current_pos + 1;
        store_kv_kernel<<<CEIL_DIV(B * C, block_size), block_size>>>(g_kv_cache, inp, g_layer_idx, g_current_pos, B,
                                                                      1, C);
        cudaCheck(cudaGetLastError());
        decode_scores_kernel<<<CEIL_DIV(B * NH * len, block_size), block_size>>>(scores, g_kv_cache, inp,
                                                                                  g_layer_idx, len, B, C, NH);
        cudaCheck(cudaGetLastError());
        decode_softmax_kernel<<<CEIL_DIV(B * NH * 32, block_size), block_size>>>(scores, len, B, NH);
        cudaCheck(cudaGetLastError());
        decode_values_kernel<<<CEIL_DIV(B * C, block_size), block_size>>>(out, scores, g_kv_cache, g_layer_idx, len,
                                                                           B, C, NH);
        cudaCheck(cudaGetLastError());
        g_layer_idx++;
        if (g_layer_idx == NUM_LAYERS) {
            g_layer_idx = 0;
            g_current_pos++;
        }
    }
}

#endif  // ATTENTION_CUH
