#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 2, req_0: joint shared-memory and register tiling. A block computes a BM x BN tile of
// c. The slices of a and b that tile needs are staged in shared memory TILED_BK columns at a time
// (each value read from global memory once per block, then reused BN or BM times), and each thread
// keeps a TM x TN sub-tile of c in registers: every value it reads from shared memory feeds TN (or
// TM) multiply-adds instead of one. attention.cuh runs its two batched matmuls on this kernel too.
constexpr int TILED_BK = 16;
// Row pitch padding of the k-major shared tiles: +4 floats keeps each row 16-byte aligned for the
// float4 reads of the inner loop and spreads the transposing stores over the shared-memory banks.
constexpr int TILED_PAD = 4;

// How b is stored: as weight and k are, (N, K), so c = a @ b^T; or as v is, (K, N), so c = a @ b.
enum class TiledLayout { B_IS_N_BY_K, B_IS_K_BY_N };

// What of a causal (T x T) product is needed:
//   FULL:             every element of c, every k;
//   SKIP_FUTURE_TILES: the scores q @ k^T: tiles wholly above the diagonal (every key after every
//                      query) are never read by the softmax, so they are not computed;
//   STOP_AT_DIAGONAL: att @ v: att is zero for keys after the query, so a tile's k loop stops at
//                      its last row.
enum class TiledCausal { FULL, SKIP_FUTURE_TILES, STOP_AT_DIAGONAL };

// c (M, N) = a (M, K) @ op(b) + bias (bias may be NULL), all row-major. blockIdx.z picks one of a
// batch of such products, each slice contiguous (attention's (b, h) slices; 1 for matmul_forward).
// Launched with (BM / TM) * (BN / TN) threads.
template <int BM, int BN, int TM, int TN, TiledLayout LAYOUT, TiledCausal CAUSAL>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
tiled_matmul_kernel(float* c, const float* a, const float* b, const float* bias, int M, int N, int K) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int THREAD_COLS = BN / TN;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "register tiles are read from shared memory as float4");
    // k-major, so that a thread's TM rows of a (and TN columns of b) for one k are contiguous.
    __shared__ __align__(16) float a_tile[TILED_BK][BM + TILED_PAD];
    __shared__ __align__(16) float b_tile[TILED_BK][BN + TILED_PAD];

    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    if (CAUSAL == TiledCausal::SKIP_FUTURE_TILES && col0 > row0 + BM - 1) return;  // the whole block leaves
    const int k_end = CAUSAL == TiledCausal::STOP_AT_DIAGONAL ? min(K, row0 + BM) : K;

    a += (size_t)blockIdx.z * M * K;
    b += (size_t)blockIdx.z * N * K;
    c += (size_t)blockIdx.z * M * N;
    const int tx = threadIdx.x % THREAD_COLS;  // this thread's TN columns start at tx * TN
    const int ty = threadIdx.x / THREAD_COLS;  // and its TM rows at ty * TM

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < k_end; k0 += TILED_BK) {
        // Consecutive threads take consecutive addresses of a row in global memory (coalesced).
        // Elements past M, N or K load as zero, so ragged edges need no special inner loop.
        for (int e = threadIdx.x; e < BM * TILED_BK; e += THREADS) {
            int r = e / TILED_BK, kk = e % TILED_BK;
            a_tile[kk][r] = (row0 + r < M && k0 + kk < K) ? a[(size_t)(row0 + r) * K + k0 + kk] : 0.0f;
        }
        for (int e = threadIdx.x; e < BN * TILED_BK; e += THREADS) {
            if (LAYOUT == TiledLayout::B_IS_N_BY_K) {
                int n = e / TILED_BK, kk = e % TILED_BK;
                b_tile[kk][n] = (col0 + n < N && k0 + kk < K) ? b[(size_t)(col0 + n) * K + k0 + kk] : 0.0f;
            } else {
                int kk = e / BN, n = e % BN;
                b_tile[kk][n] = (col0 + n < N && k0 + kk < K) ? b[(size_t)(k0 + kk) * N + col0 + n] : 0.0f;
            }
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILED_BK; kk++) {
            float a_regs[TM], b_regs[TN];
            #pragma unroll
            for (int i = 0; i < TM; i++) a_regs[i] = a_tile[kk][ty * TM + i];
            #pragma unroll
            for (int j = 0; j < TN; j++) b_regs[j] = b_tile[kk][tx * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; i++)
                #pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a_regs[i] * b_regs[j];
        }
        __syncthreads();  // the next tiles overwrite what every thread just read
    }

    #pragma unroll
    for (int i = 0; i < TM; i++) {
        int row = row0 + ty * TM + i;
        if (row >= M) break;
        #pragma unroll
        for (int j = 0; j < TN; j++) {
            int col = col0 + tx * TN + j;
            if (col < N) c[(size_t)row * N + col] = acc[i][j] + (bias != nullptr ? bias[col] : 0.0f);
        }
    }
}

// 128 x 128 tiles, 8 x 8 outputs per thread: 256 threads, 64 accumulators each.
constexpr int MATMUL_BM = 128;
constexpr int MATMUL_BN = 128;
constexpr int MATMUL_TM = 8;
constexpr int MATMUL_TN = 8;

// out (B*T, OC) = inp (B*T, C) @ weight (OC, C)^T + bias (NULL: none).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(OC, MATMUL_BN), CEIL_DIV(M, MATMUL_BM));
    constexpr int threads = (MATMUL_BM / MATMUL_TM) * (MATMUL_BN / MATMUL_TN);
    tiled_matmul_kernel<MATMUL_BM, MATMUL_BN, MATMUL_TM, MATMUL_TN, TiledLayout::B_IS_N_BY_K, TiledCausal::FULL>
        <<<grid, threads>>>(out, inp, weight, bias, M, OC, C);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
