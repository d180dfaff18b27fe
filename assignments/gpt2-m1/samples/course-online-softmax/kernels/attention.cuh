#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"

// inp (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS)
__global__ void permute_kernel(float* q, float* k, float* v, const float* inp, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    // Q[b][nh_][n][d_] = inp[b][n][0][nh_][d_]
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

// y (B, NH, T, HS) -> out (B, T, NH, HS)
__global__ void unpermute_kernel(const float* inp, float* out, int B, int N, int NH, int d) {
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

// preatt[bh, t, t2] = q[bh, t, :] . k[bh, t2, :] for t2 <= t (the rest is never read)
// replaces cublasSgemmStridedBatched, one thread per element
__global__ void preatt_kernel(float* preatt, const float* q, const float* k, int BH, int T, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < BH * T * T) {
        int t2 = idx % T;
        int t = (idx / T) % T;
        int bh = idx / (T * T);
        if (t2 > t) return;
        const float* q_t = q + bh * T * HS + t * HS;
        const float* k_t2 = k + bh * T * HS + t2 * HS;
        float val = 0.0f;
        for (int i = 0; i < HS; i++) {
            val += q_t[i] * k_t2[i];
        }
        preatt[idx] = val;
    }
}

// online softmax (Milakov & Gimelshein 2018): max and sum in one loop instead of two.
// one warp per row of preatt, row = (bh, t) so keys 0..t are visible. scale is applied here.
__global__ void softmax_forward_online_kernel(float* att, const float* preatt, float scale, int N, int T) {
    int warpsPerBlock = blockDim.x / 32;
    int warpId = threadIdx.x / 32;
    int laneId = threadIdx.x % 32;
    int row = blockIdx.x * warpsPerBlock + warpId;
    if (row >= N) return;  // whole warp returns together
    int t = row % T;
    const float* x = preatt + row * T;
    float* y = att + row * T;

    // each lane: running max and the sum of exp(x - running max) of its own elements
    float maxval = -INFINITY;
    float sumval = 0.0f;
    for (int i = laneId; i <= t; i += 32) {
        float xi = x[i] * scale;
        float bigger = fmaxf(maxval, xi);
        // when the max changes, rescale the old sum by e^(old max - new max)
        sumval = sumval * expf(maxval - bigger) + expf(xi - bigger);
        maxval = bigger;
    }

    // combine the lanes: same rescaling trick for every pair
    for (int offset = 16; offset > 0; offset /= 2) {
        float other_max = __shfl_xor_sync(0xffffffff, maxval, offset);
        float other_sum = __shfl_xor_sync(0xffffffff, sumval, offset);
        float bigger = fmaxf(maxval, other_max);
        if (bigger != -INFINITY) {  // both lanes had nothing yet (short rows), -inf - -inf would be NaN
            sumval = sumval * expf(maxval - bigger) + other_sum * expf(other_max - bigger);
        }
        maxval = bigger;
    }

    // write the probabilities, zeros for the future so att @ v can run over the full row
    for (int i = laneId; i < T; i += 32) {
        y[i] = (i <= t) ? expf(x[i] * scale - maxval) / sumval : 0.0f;
    }
}

// y[bh, t, i] = sum over t2 of att[bh, t, t2] * v[bh, t2, i], replaces the second cuBLAS call
__global__ void att_v_kernel(float* y, const float* att, const float* v, int BH, int T, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < BH * T * HS) {
        int i = idx % HS;
        int t = (idx / HS) % T;
        int bh = idx / (T * HS);
        const float* att_t = att + bh * T * T + t * T;
        const float* v_bh = v + bh * T * HS;
        float val = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            val += att_t[t2] * v_bh[t2 * HS + i];
        }
        y[idx] = val;
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    // Note: `inp` is not needed after the permute, so it is re-used as a scratch buffer
    // (for preatt and then for the result before unpermuting)
    const int block_size = 256;
    const int softmax_block_size = 256;
    int HS = C / NH;  // head size

    // permute and separate inp from (B, T, 3, NH, HS) to 3X (B, NH, T, HS)
    float *q, *k, *v;
    q = qkvr + 0 * B * T * C;
    k = qkvr + 1 * B * T * C;
    v = qkvr + 2 * B * T * C;
    int total_threads = B * NH * T * HS;
    int num_blocks = CEIL_DIV(total_threads, block_size);
    permute_kernel<<<num_blocks, block_size>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());

    // preatt = q @ k^T
    float* preatt = inp;
    num_blocks = CEIL_DIV(B * NH * T * T, block_size);
    preatt_kernel<<<num_blocks, block_size>>>(preatt, q, k, B * NH, T, HS);
    cudaCheck(cudaGetLastError());

    // att = softmax(scale * preatt), causal
    float scale = 1.0 / sqrtf(HS);
    int grid_size = CEIL_DIV(B * NH * T * 32, softmax_block_size);
    softmax_forward_online_kernel<<<grid_size, softmax_block_size>>>(att, preatt, scale, B * NH * T, T);
    cudaCheck(cudaGetLastError());

    // y = att @ v  (B, NH, T, T) @ (B, NH, T, HS) -> (B, NH, T, HS)
    float* vaccum = inp;
    num_blocks = CEIL_DIV(B * NH * T * HS, block_size);
    att_v_kernel<<<num_blocks, block_size>>>(vaccum, att, v, B * NH, T, HS);
    cudaCheck(cudaGetLastError());

    // re-assemble all head outputs side by side
    num_blocks = CEIL_DIV(B * T * C, block_size);
    unpermute_kernel<<<num_blocks, block_size>>>(vaccum, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
