#ifndef ATTENTION_BASELINE_CUH
#define ATTENTION_BASELINE_CUH

// Milestone 1's attention, its host function renamed: attention.cuh's full recompute (the cache off) and its
// prefill's attention.

#include "../utils/cuda_utils.cuh"
#include "../kernels/softmax.cuh"

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

// Tiling shared by both batched matmuls: a block computes an ATTN_TILE x ATTN_TILE tile of one
// (b, h) slice (blockIdx.z); each of its 16 x 16 threads owns 4 x 4 outputs strided by 16.
constexpr int ATTN_TILE = 64;
constexpr int ATTN_TILE_K = 16;
constexpr int ATTN_THREADS = 256;

// One causal batched matmul, c = a @ op(b), with a (M, K) and c (M, N) row-major per slice:
//   SCORES:  preatt = q @ k^T: b is k, stored (N, K); tiles wholly above the diagonal (every key
//            after every query) are skipped, since the softmax never reads them.
//   !SCORES: vaccum = att @ v: b is v, stored (K, N); the inner loop stops at the tile's last
//            query, since att is zero for later keys.
template <bool SCORES>
__global__ void __launch_bounds__(ATTN_THREADS)
attention_matmul_kernel(float* c, const float* a, const float* b, int M, int N, int K) {
    __shared__ float a_tile[ATTN_TILE_K][ATTN_TILE + 1];  // k-major; +1 spreads the transposing stores
    __shared__ float b_tile[ATTN_TILE_K][ATTN_TILE + 1];

    int row0 = blockIdx.y * ATTN_TILE;
    int col0 = blockIdx.x * ATTN_TILE;
    if (SCORES && col0 > row0 + ATTN_TILE - 1) return;
    int k_end = SCORES ? K : min(K, row0 + ATTN_TILE);

    a += (size_t)blockIdx.z * M * K;
    b += (size_t)blockIdx.z * N * K;
    c += (size_t)blockIdx.z * M * N;
    int tx = threadIdx.x % 16;
    int ty = threadIdx.x / 16;

    float acc[4][4] = {};
    for (int k0 = 0; k0 < k_end; k0 += ATTN_TILE_K) {
        // Out-of-range elements load as zero, so ragged T and HS need no special inner loop.
        for (int e = threadIdx.x; e < ATTN_TILE * ATTN_TILE_K; e += ATTN_THREADS) {
            int r = e / ATTN_TILE_K;
            int kk = e % ATTN_TILE_K;
            a_tile[kk][r] = (row0 + r < M && k0 + kk < K) ? a[(size_t)(row0 + r) * K + k0 + kk] : 0.0f;
            if (SCORES) {
                b_tile[kk][r] = (col0 + r < N && k0 + kk < K) ? b[(size_t)(col0 + r) * K + k0 + kk] : 0.0f;
            } else {
                // Walk b's rows along n instead, so consecutive threads read consecutive addresses.
                int n = e % ATTN_TILE;
                int kr = e / ATTN_TILE;
                b_tile[kr][n] = (col0 + n < N && k0 + kr < K) ? b[(size_t)(k0 + kr) * N + col0 + n] : 0.0f;
            }
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < ATTN_TILE_K; kk++) {
            float x[4], y[4];
            #pragma unroll
            for (int i = 0; i < 4; i++) x[i] = a_tile[kk][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < 4; j++) y[j] = b_tile[kk][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < 4; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += x[i] * y[j];
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int col = col0 + tx + 16 * j;
            if (row < M && col < N) c[(size_t)row * N + col] = acc[i][j];
        }
    }
}

inline void attention_forward_baseline(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
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
    dim3 scores_grid(CEIL_DIV(T, ATTN_TILE), CEIL_DIV(T, ATTN_TILE), B * NH);
    attention_matmul_kernel<true><<<scores_grid, ATTN_THREADS>>>(preatt, q, k, T, T, HS);
    cudaCheck(cudaGetLastError());

    int rows = B * NH * T;
    int rows_per_block = block_size / 32;
    softmax_forward_kernel<<<CEIL_DIV(rows, rows_per_block), block_size>>>(att, preatt, 1.0f / sqrtf((float)HS),
                                                                           rows, T);
    cudaCheck(cudaGetLastError());

    // The scores are spent after the softmax, so inp is free again to hold att @ v (B, NH, T, HS).
    float* vaccum = inp;
    dim3 values_grid(CEIL_DIV(HS, ATTN_TILE), CEIL_DIV(T, ATTN_TILE), B * NH);
    attention_matmul_kernel<false><<<values_grid, ATTN_THREADS>>>(vaccum, att, v, T, HS, T);
    cudaCheck(cudaGetLastError());

    attention_unpermute_kernel<<<elem_blocks, block_size>>>(out, vaccum, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_BASELINE_CUH
