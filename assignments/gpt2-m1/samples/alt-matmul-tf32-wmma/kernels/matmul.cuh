#ifndef MATMUL_CUH
#define MATMUL_CUH

#include <mma.h>
#include "../utils/cuda_utils.cuh"

// Block tile 32x32 of out, four warps each owning one 16x16 wmma tile, K staged 32 at a time.
#define ALT_MATMUL_WMMA_TILE 32
#define ALT_MATMUL_WMMA_KT 32
// Row pitch of the shared tiles: a multiple of 4 floats, as wmma needs for 32-bit types, and off
// the 32-bank stride.
#define ALT_MATMUL_WMMA_LD (ALT_MATMUL_WMMA_KT + 4)

// out[m, o] = sum_c inp[m, c] * weight[o, c] + bias[o]. A = inp (M x C, row-major), B = weight^T,
// which is weight's own (OC x C) row-major layout read as a col-major (C x OC) matrix.
__global__ void alt_matmul_wmma_kernel(float* out, const float* inp, const float* weight, const float* bias,
                                       int M, int C, int OC) {
    using namespace nvcuda;
    // Tiles outside the matrix are zero-filled, so ragged edges add nothing to the sums.
    __shared__ __align__(128) float a_tile[ALT_MATMUL_WMMA_TILE][ALT_MATMUL_WMMA_LD];
    __shared__ __align__(128) float w_tile[ALT_MATMUL_WMMA_TILE][ALT_MATMUL_WMMA_LD];
    __shared__ __align__(128) float c_tile[ALT_MATMUL_WMMA_TILE][ALT_MATMUL_WMMA_LD];

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int warp_row = warp / 2;  // which 16-row half of the block tile
    const int warp_col = warp % 2;  // which 16-column half
    const int m0 = blockIdx.y * ALT_MATMUL_WMMA_TILE;
    const int o0 = blockIdx.x * ALT_MATMUL_WMMA_TILE;

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);

    for (int k0 = 0; k0 < C; k0 += ALT_MATMUL_WMMA_KT) {
        for (int i = tid; i < ALT_MATMUL_WMMA_TILE * ALT_MATMUL_WMMA_KT; i += blockDim.x) {
            const int r = i / ALT_MATMUL_WMMA_KT;
            const int kk = i % ALT_MATMUL_WMMA_KT;
            const int k = k0 + kk;
            const int m = m0 + r;
            const int o = o0 + r;
            a_tile[r][kk] = (m < M && k < C) ? inp[(long long)m * C + k] : 0.0f;
            w_tile[r][kk] = (o < OC && k < C) ? weight[(long long)o * C + k] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < ALT_MATMUL_WMMA_KT; kk += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_frag;
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b_frag;
            wmma::load_matrix_sync(a_frag, &a_tile[warp_row * 16][kk], ALT_MATMUL_WMMA_LD);
            wmma::load_matrix_sync(b_frag, &w_tile[warp_col * 16][kk], ALT_MATMUL_WMMA_LD);
            for (int e = 0; e < a_frag.num_elements; e++) a_frag.x[e] = wmma::__float_to_tf32(a_frag.x[e]);
            for (int e = 0; e < b_frag.num_elements; e++) b_frag.x[e] = wmma::__float_to_tf32(b_frag.x[e]);
            wmma::mma_sync(acc, a_frag, b_frag, acc);
        }
        __syncthreads();  // the next iteration overwrites the tiles every warp just read
    }

    // Through shared memory, so that the ragged edge of out is written element by element.
    wmma::store_matrix_sync(&c_tile[warp_row * 16][warp_col * 16], acc, ALT_MATMUL_WMMA_LD, wmma::mem_row_major);
    __syncthreads();
    for (int i = tid; i < ALT_MATMUL_WMMA_TILE * ALT_MATMUL_WMMA_TILE; i += blockDim.x) {
        const int r = i / ALT_MATMUL_WMMA_TILE;
        const int cc = i % ALT_MATMUL_WMMA_TILE;
        const int m = m0 + r;
        const int o = o0 + cc;
        if (m < M && o < OC) out[(long long)m * OC + o] = c_tile[r][cc] + (bias != NULL ? bias[o] : 0.0f);
    }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    const int M = B * T;
    const dim3 grid(CEIL_DIV(OC, ALT_MATMUL_WMMA_TILE), CEIL_DIV(M, ALT_MATMUL_WMMA_TILE));
    alt_matmul_wmma_kernel<<<grid, 128>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
