#ifndef LOCAL_ATTENTION_CUH
#define LOCAL_ATTENTION_CUH

#include "../utils/cuda_utils.cuh"

// The course's cpu_kernels/local_attention.cuh moved to the GPU as it stands: one thread per query row (b, h, t),
// float32, expf, the weights of its window in a local array (129 floats, where the CPU's calloc(WINDOW_SIZE) is one
// short). Permute and unpermute as in milestone 1's attention.
#define WINDOW_SIZE 128

__global__ void permute_kernel_local(float* q, float* k, float* v, const float* inp, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int b = idx / (NH * N * d);
        int rest = idx % (NH * N * d);
        int nh_ = rest / (N * d);
        rest = rest % (N * d);
        int n = rest / d;
        int d_ = rest % d;
        int inp_idx = (b * N * 3 * NH * d) + (n * 3 * NH * d) + (0 * NH * d) + (nh_ * d) + d_;
        q[idx] = inp[inp_idx];
        k[idx] = inp[inp_idx + NH * d];
        v[idx] = inp[inp_idx + 2 * (NH * d)];
    }
}

__global__ void unpermute_kernel_local(float* inp, float* out, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int b = idx / (NH * N * d);
        int rest = idx % (NH * N * d);
        int nh_ = rest / (N * d);
        rest = rest % (N * d);
        int n = rest / d;
        int d_ = rest % d;
        int other_idx = (b * NH * N * d) + (n * NH * d) + (nh_ * d) + d_;
        out[other_idx] = inp[idx];
    }
}

__global__ void local_attention_row_kernel(float* y, const float* q, const float* k, const float* v, int B, int T,
                                           int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int q_t = idx % T;
    int bh = idx / T;
    const float* query = q + (size_t)idx * HS;
    float scale = 1.0f / sqrtf((float)HS);
    float weights[WINDOW_SIZE + 1];
    int k_start = max(0, q_t - WINDOW_SIZE);
    float maxval = -INFINITY;
    for (int k_t = k_start; k_t <= q_t; k_t++) {
        const float* key = k + ((size_t)bh * T + k_t) * HS;
        float w = 0.0f;
        for (int i = 0; i < HS; i++) w += query[i] * key[i];
        weights[k_t - k_start] = w;
        if (w > maxval) maxval = w;
    }
    float sum = 0.0f;
    for (int k_t = k_start; k_t <= q_t; k_t++) {
        float e = expf(scale * (weights[k_t - k_start] - maxval));
        weights[k_t - k_start] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    float* out = y + (size_t)idx * HS;
    for (int i = 0; i < HS; i++) out[i] = 0.0f;
    for (int k_t = k_start; k_t <= q_t; k_t++) {
        const float* value = v + ((size_t)bh * T + k_t) * HS;
        float p = weights[k_t - k_start] * inv;
        for (int i = 0; i < HS; i++) out[i] += p * value[i];
    }
}

void local_attention_forward_gpu(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS) {
    int block_size = 256;
    int total = B * NH * T * HS;
    float *q = qkvr, *k = qkvr + total, *v = qkvr + 2 * total;
    permute_kernel_local<<<CEIL_DIV(total, block_size), block_size>>>(q, k, v, inp, B, T, NH, HS);
    local_attention_row_kernel<<<CEIL_DIV(B * NH * T, block_size), block_size>>>(inp, q, k, v, B, T, NH, HS);
    unpermute_kernel_local<<<CEIL_DIV(total, block_size), block_size>>>(inp, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif
