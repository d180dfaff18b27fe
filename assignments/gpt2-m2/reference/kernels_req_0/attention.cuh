#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include "../utils/cuda_utils.cuh"
#include "../kernels/softmax.cuh"
// req_0's tiled_matmul_kernel: the same shared-memory and register tiling for both batched matmuls.
#include "../kernels/matmul.cuh"

// Splits inp's packed (B, T, 3, NH, HS) rows into q, k and v, each (B, NH, T, HS), so that every
// head's rows are contiguous for the batched matmuls.
__global__ void attention_permute_kernel(float* q, float* k, float* v, const float* inp, int B, int T, int NH, int HS) {
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

// The inverse for the result: vaccum (B, NH, T, HS) back to out (B, T, C), head h at channels h*HS...
__global__ void attention_unpermute_kernel(float* out, const float* vaccum, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS;
    size_t rest = idx / HS;
    int t = rest % T;
    rest /= T;
    int h = rest % NH;
    int b = rest / NH;
    out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = vaccum[idx];
}

// The scores (T x T per head) take matmul's 128 x 128 tiles; att @ v has only HS (64 in GPT-2)
// columns, so its tiles are 128 x 64 with 8 x 4 outputs per thread (256 threads either way).
constexpr int ATTN_SCORES_BM = 128, ATTN_SCORES_BN = 128, ATTN_SCORES_TM = 8, ATTN_SCORES_TN = 8;
constexpr int ATTN_VALUES_BM = 128, ATTN_VALUES_BN = 64, ATTN_VALUES_TM = 8, ATTN_VALUES_TN = 4;

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    size_t head_elems = (size_t)B * NH * T * HS;
    if (head_elems == 0) return;
    float* q = qkvr;
    float* k = qkvr + head_elems;
    float* v = qkvr + 2 * head_elems;
    const int block_size = 256;
    unsigned elem_blocks = (unsigned)CEIL_DIV(head_elems, block_size);

    attention_permute_kernel<<<elem_blocks, block_size>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());

    // inp's values now live in q, k and v, so inp holds the unscaled scores (B, NH, T, T): that is
    // why it is allocated with max(3C, NH*T) floats per token.
    float* preatt = inp;
    dim3 scores_grid(CEIL_DIV(T, ATTN_SCORES_BN), CEIL_DIV(T, ATTN_SCORES_BM), B * NH);
    constexpr int scores_threads = (ATTN_SCORES_BM / ATTN_SCORES_TM) * (ATTN_SCORES_BN / ATTN_SCORES_TN);
    tiled_matmul_kernel<ATTN_SCORES_BM, ATTN_SCORES_BN, ATTN_SCORES_TM, ATTN_SCORES_TN, TiledLayout::B_IS_N_BY_K,
                        TiledCausal::SKIP_FUTURE_TILES>
        <<<scores_grid, scores_threads>>>(preatt, q, k, nullptr, T, T, HS);
    cudaCheck(cudaGetLastError());

    int rows = B * NH * T;
    int rows_per_block = block_size / 32;
    softmax_forward_kernel<<<CEIL_DIV(rows, rows_per_block), block_size>>>(att, preatt, 1.0f / sqrtf((float)HS),
                                                                           rows, T);
    cudaCheck(cudaGetLastError());

    // The scores are spent after the softmax, so inp is free again to hold att @ v (B, NH, T, HS).
    float* vaccum = inp;
    dim3 values_grid(CEIL_DIV(HS, ATTN_VALUES_BN), CEIL_DIV(T, ATTN_VALUES_BM), B * NH);
    constexpr int values_threads = (ATTN_VALUES_BM / ATTN_VALUES_TM) * (ATTN_VALUES_BN / ATTN_VALUES_TN);
    tiled_matmul_kernel<ATTN_VALUES_BM, ATTN_VALUES_BN, ATTN_VALUES_TM, ATTN_VALUES_TN, TiledLayout::B_IS_K_BY_N,
                        TiledCausal::STOP_AT_DIAGONAL>
        <<<values_grid, values_threads>>>(vaccum, att, v, nullptr, T, HS, T);
    cudaCheck(cudaGetLastError());

    attention_unpermute_kernel<<<elem_blocks, block_size>>>(out, vaccum, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
