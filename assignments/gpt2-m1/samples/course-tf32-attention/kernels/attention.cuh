#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include <mma.h>
#include "../utils/cuda_utils.cuh"
#include "softmax.cuh"

// inp (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS)
__global__ void permute_kernel(float* q, float* k, float* v, const float* inp, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * T * HS) {
        int b = idx / (NH * T * HS);
        int rest = idx % (NH * T * HS);
        int h = rest / (T * HS);
        rest = rest % (T * HS);
        int t = rest / HS;
        int d = rest % HS;
        int C = NH * HS;
        int inp_idx = b * T * 3 * C + t * 3 * C + h * HS + d;
        q[idx] = inp[inp_idx];
        k[idx] = inp[inp_idx + C];
        v[idx] = inp[inp_idx + 2 * C];
    }
}

// y (B, NH, T, HS) -> out (B, T, NH, HS)
__global__ void unpermute_kernel(const float* y, float* out, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * T * HS) {
        int b = idx / (NH * T * HS);
        int rest = idx % (NH * T * HS);
        int h = rest / (T * HS);
        rest = rest % (T * HS);
        int t = rest / HS;
        int d = rest % HS;
        out[b * T * NH * HS + t * NH * HS + h * HS + d] = y[idx];
    }
}

// TF32 tensor core batched matmul with wmma: one block = 32x32 tile of the output, 4 warps, each
// warp one 16x16 accumulator. K goes through shared memory 32 at a time. Everything outside the
// matrices is loaded as 0 so M, N, K don't have to be multiples of anything.
#define TC_TILE 32
#define TC_KT 32
#define TC_LD (TC_KT + 4)  // wmma wants a multiple of 4 floats; +4 also helps with bank conflicts

// For every batch z: Cm[z] (M x N) = A[z] (M x K) @ op(B[z]), everything row-major.
//   B_TRANSPOSED:  B[z] is stored (N x K) and used transposed   (k in q @ k^T)
//   !B_TRANSPOSED: B[z] is stored (K x N)                       (v in att @ v)
// CAUSAL skips output tiles that are entirely above the diagonal (the softmax never reads them).
template <bool B_TRANSPOSED, bool CAUSAL>
__global__ void matmul_tf32_kernel(float* Cm, const float* A, const float* Bm, int M, int N, int K) {
    using namespace nvcuda;
    __shared__ __align__(128) float a_tile[TC_TILE][TC_LD];  // a_tile[m][k]
    __shared__ __align__(128) float b_tile[TC_TILE][TC_LD];  // b_tile[n][k], i.e. B col-major
    __shared__ __align__(128) float c_tile[TC_TILE][TC_TILE + 4];

    int m0 = blockIdx.y * TC_TILE;
    int n0 = blockIdx.x * TC_TILE;
    if (CAUSAL && n0 > m0 + TC_TILE - 1) return;  // whole block leaves, before any __syncthreads

    int z = blockIdx.z;
    A += (long)z * M * K;
    Bm += (long)z * N * K;
    Cm += (long)z * M * N;

    int tid = threadIdx.x;
    int warp_id = tid / 32;
    int warp_row = warp_id / 2;
    int warp_col = warp_id % 2;

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);

    for (int k0 = 0; k0 < K; k0 += TC_KT) {
        for (int i = tid; i < TC_TILE * TC_KT; i += blockDim.x) {
            int r = i / TC_KT;
            int kk = i % TC_KT;
            a_tile[r][kk] = (m0 + r < M && k0 + kk < K) ? A[(long)(m0 + r) * K + k0 + kk] : 0.0f;
            if (B_TRANSPOSED) {
                b_tile[r][kk] = (n0 + r < N && k0 + kk < K) ? Bm[(long)(n0 + r) * K + k0 + kk] : 0.0f;
            } else {
                // walk n fastest here so the global reads of a row of B are coalesced
                int n = i % TC_TILE;
                int kr = i / TC_TILE;
                b_tile[n][kr] = (n0 + n < N && k0 + kr < K) ? Bm[(long)(k0 + kr) * N + n0 + n] : 0.0f;
            }
        }
        __syncthreads();

        for (int kk = 0; kk < TC_KT; kk += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_frag;
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b_frag;
            wmma::load_matrix_sync(a_frag, &a_tile[warp_row * 16][kk], TC_LD);
            wmma::load_matrix_sync(b_frag, &b_tile[warp_col * 16][kk], TC_LD);
            for (int e = 0; e < a_frag.num_elements; e++) a_frag.x[e] = wmma::__float_to_tf32(a_frag.x[e]);
            for (int e = 0; e < b_frag.num_elements; e++) b_frag.x[e] = wmma::__float_to_tf32(b_frag.x[e]);
            wmma::mma_sync(acc, a_frag, b_frag, acc);
        }
        __syncthreads();
    }

    // go through shared memory so the edges can be written with bounds checks
    wmma::store_matrix_sync(&c_tile[warp_row * 16][warp_col * 16], acc, TC_TILE + 4, wmma::mem_row_major);
    __syncthreads();
    for (int i = tid; i < TC_TILE * TC_TILE; i += blockDim.x) {
        int r = i / TC_TILE;
        int c = i % TC_TILE;
        if (m0 + r < M && n0 + c < N) {
            Cm[(long)(m0 + r) * N + n0 + c] = c_tile[r][c];
        }
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    const int block_size = 256;
    int HS = C / NH;

    float* q = qkvr + 0 * B * T * C;
    float* k = qkvr + 1 * B * T * C;
    float* v = qkvr + 2 * B * T * C;
    int total_threads = B * NH * T * HS;
    permute_kernel<<<CEIL_DIV(total_threads, block_size), block_size>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());

    // preatt = q @ k^T into inp (not needed anymore after the permute, and big enough for B*NH*T*T)
    float* preatt = inp;
    dim3 grid_qk(CEIL_DIV(T, TC_TILE), CEIL_DIV(T, TC_TILE), B * NH);
    matmul_tf32_kernel<true, true><<<grid_qk, 128>>>(preatt, q, k, T, T, HS);
    cudaCheck(cudaGetLastError());

    float scale = 1.0f / sqrtf((float)HS);
    int rows = B * NH * T;
    softmax_causal_kernel<<<CEIL_DIV(rows * 32, block_size), block_size>>>(att, preatt, scale, rows, T);
    cudaCheck(cudaGetLastError());

    // y = att @ v, again into inp
    float* y = inp;
    dim3 grid_av(CEIL_DIV(HS, TC_TILE), CEIL_DIV(T, TC_TILE), B * NH);
    matmul_tf32_kernel<false, false><<<grid_av, 128>>>(y, att, v, T, HS, T);
    cudaCheck(cudaGetLastError());

    unpermute_kernel<<<CEIL_DIV(total_threads, block_size), block_size>>>(y, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
