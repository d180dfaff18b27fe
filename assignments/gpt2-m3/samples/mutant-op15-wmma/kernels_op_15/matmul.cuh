#ifndef MATMUL_CUH
#define MATMUL_CUH

#include <mma.h>
#include <type_traits>
#include "../utils/cuda_utils.cuh"

// Milestone 2, req_1: tensor cores with TF32. nvcuda::wmma's m16n16k8 TF32 fragments multiply,
// accumulating in FP32. A block of 4 warps computes a 64 x 64 tile of c, each warp a 32 x 32
// quarter as 2 x 2 fragments; the slices of a and b are staged in shared memory 32 columns of k
// at a time, rounded to TF32 once there and zero-padded past the edges of the matrices, so any M,
// N and K work (wmma itself only reads whole 16 x 8 tiles, from 32-byte aligned addresses).
// attention.cuh runs its two batched matmuls on this kernel too.
constexpr int WMMA_BM = 64;
constexpr int WMMA_BN = 64;
constexpr int WMMA_BK = 32;
constexpr int WMMA_THREADS = 128;  // 4 warps, 2 x 2 over the block tile
constexpr int WMMA_WARP_TILE = 32;
// Row pitch padding of the shared tiles: 4 floats keep rows a multiple of 16 bytes (wmma's ldm
// for 32-bit types) and fragment starts 32-byte aligned, and shift each row by 4 banks.
constexpr int WMMA_PAD = 4;

// How b is stored: as weight and k are, (N, K), so c = a @ b^T; or as v is, (K, N), so c = a @ b.
enum class WmmaLayout { B_IS_N_BY_K, B_IS_K_BY_N };

// What of a causal (T x T) product is needed:
//   FULL:             every element of c, every k;
//   SKIP_FUTURE_TILES: the scores q @ k^T: tiles wholly above the diagonal (every key after every
//                      query) are never read by the softmax, so they are not computed;
//   STOP_AT_DIAGONAL: att @ v: att is zero for keys after the query, so a tile's k loop stops at
//                      its last row.
enum class WmmaCausal { FULL, SKIP_FUTURE_TILES, STOP_AT_DIAGONAL };

// The shared tiles: a and b for the k loop, then c's tile for the ragged-edge store. b's shape
// depends on its layout: (BN, BK) read as a col-major (BK, BN) matrix_b, or (BK, BN) row-major.
template <WmmaLayout LAYOUT>
struct WmmaTiles {
    static constexpr int B_ROWS = LAYOUT == WmmaLayout::B_IS_N_BY_K ? WMMA_BN : WMMA_BK;
    static constexpr int B_PITCH = (LAYOUT == WmmaLayout::B_IS_N_BY_K ? WMMA_BK : WMMA_BN) + WMMA_PAD;
    float a[WMMA_BM][WMMA_BK + WMMA_PAD];
    float b[B_ROWS][B_PITCH];
    float c[WMMA_BM][WMMA_BN + WMMA_PAD];
};

// c (M, N) = a (M, K) @ op(b) + bias (bias may be NULL), all row-major. blockIdx.z picks one of a
// batch of such products, each slice contiguous (attention's (b, h) slices; 1 for matmul_forward).
template <WmmaLayout LAYOUT, WmmaCausal CAUSAL>
__global__ void __launch_bounds__(WMMA_THREADS)
wmma_matmul_kernel(float* c, const float* a, const float* b, const float* bias, int M, int N, int K) {
    using namespace nvcuda;
    using Tiles = WmmaTiles<LAYOUT>;
    using BLayout = typename std::conditional<LAYOUT == WmmaLayout::B_IS_N_BY_K, wmma::col_major,
                                              wmma::row_major>::type;
    __shared__ __align__(32) Tiles tiles;

    const int row0 = blockIdx.y * WMMA_BM;
    const int col0 = blockIdx.x * WMMA_BN;
    if (CAUSAL == WmmaCausal::SKIP_FUTURE_TILES && col0 > row0 + WMMA_BM - 1) return;  // the whole block leaves
    const int k_end = CAUSAL == WmmaCausal::STOP_AT_DIAGONAL ? min(K, row0 + WMMA_BM) : K;

    a += (size_t)blockIdx.z * M * K;
    b += (size_t)blockIdx.z * N * K;
    c += (size_t)blockIdx.z * M * N;
    const int warp = threadIdx.x / 32;
    const int warp_row = (warp / 2) * WMMA_WARP_TILE;  // this warp's quarter of the block tile
    const int warp_col = (warp % 2) * WMMA_WARP_TILE;

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
    #pragma unroll
    for (int i = 0; i < 2; i++)
        #pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < k_end; k0 += WMMA_BK) {
        // Consecutive threads take consecutive addresses of a row in global memory (coalesced).
        // Elements past M, N or K load as zero, so they add nothing to the sums.
        for (int e = threadIdx.x; e < WMMA_BM * WMMA_BK; e += WMMA_THREADS) {
            int r = e / WMMA_BK, kk = e % WMMA_BK;
            float value = (row0 + r < M && k0 + kk < K) ? a[(size_t)(row0 + r) * K + k0 + kk] : 0.0f;
            tiles.a[r][kk] = wmma::__float_to_tf32(value);
        }
        for (int e = threadIdx.x; e < WMMA_BN * WMMA_BK; e += WMMA_THREADS) {
            if (LAYOUT == WmmaLayout::B_IS_N_BY_K) {
                int n = e / WMMA_BK, kk = e % WMMA_BK;
                float value = (col0 + n < N && k0 + kk < K) ? b[(size_t)(col0 + n) * K + k0 + kk] : 0.0f;
                tiles.b[n][kk] = wmma::__float_to_tf32(value);
            } else {
                int kk = e / WMMA_BN, n = e % WMMA_BN;
                float value = (col0 + n < N && k0 + kk < K) ? b[(size_t)(k0 + kk) * N + col0 + n] : 0.0f;
                tiles.b[kk][n] = wmma::__float_to_tf32(value);
            }
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < WMMA_BK; kk += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_frag[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, BLayout> b_frag[2];
            #pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a_frag[i], &tiles.a[warp_row + 16 * i][kk], WMMA_BK + WMMA_PAD);
            #pragma unroll
            for (int j = 0; j < 2; j++) {
                const float* b_start = LAYOUT == WmmaLayout::B_IS_N_BY_K ? &tiles.b[warp_col + 16 * j][kk]
                                                                         : &tiles.b[kk][warp_col + 16 * j];
                wmma::load_matrix_sync(b_frag[j], b_start, Tiles::B_PITCH);
            }
            #pragma unroll
            for (int i = 0; i < 2; i++)
                #pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
        }
        __syncthreads();  // the next tiles overwrite what every warp just read
    }

    // Through shared memory, so that the ragged edge of c is written element by element (a
    // fragment is stored whole, and only to 32-byte aligned addresses).
    #pragma unroll
    for (int i = 0; i < 2; i++)
        #pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&tiles.c[warp_row + 16 * i][warp_col + 16 * j], acc[i][j], WMMA_BN + WMMA_PAD,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int e = threadIdx.x; e < WMMA_BM * WMMA_BN; e += WMMA_THREADS) {
        int r = e / WMMA_BN, cc = e % WMMA_BN;
        int row = row0 + r, col = col0 + cc;
        if (row < M && col < N) c[(size_t)row * N + col] = tiles.c[r][cc] + (bias != nullptr ? bias[col] : 0.0f);
    }
}

// out (B*T, OC) = inp (B*T, C) @ weight (OC, C)^T + bias (NULL: none).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(OC, WMMA_BN), CEIL_DIV(M, WMMA_BM));
    wmma_matmul_kernel<WmmaLayout::B_IS_N_BY_K, WmmaCausal::FULL><<<grid, WMMA_THREADS>>>(out, inp, weight, bias,
                                                                                         M, OC, C);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
