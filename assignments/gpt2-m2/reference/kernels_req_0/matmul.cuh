#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// Milestone 2, req_0: joint shared-memory and register tiling. A block computes a BM x BN tile of
// c. The slices of a and b that tile needs are staged in shared memory TILED_BK columns at a time
// (each value read from global memory once per block, then reused BN or BM times), and each thread
// keeps a TM x TN sub-tile of c in registers: every value it reads from shared memory feeds TN (or
// TM) multiply-adds instead of one. attention.cuh runs its two batched matmuls on this kernel too.
constexpr int TILED_BK = 8;
// Row pitch padding of the k-major shared tiles: +4 floats keeps each row 16-byte aligned for the
// float4 reads of the inner loop, and makes the transposing stores of a warp hit 32 distinct banks.
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

// Four consecutive elements of a row from k on, those at or past `end` as zero: one 16-byte load
// where the row allows it (`vec`: rows and base 16-byte aligned), else one element at a time.
__device__ __forceinline__ float4 tiled_load4(const float* row, int k, int end, bool vec) {
    if (vec && k + 3 < end) return *reinterpret_cast<const float4*>(row + k);
    return make_float4(k < end ? row[k] : 0.0f, k + 1 < end ? row[k + 1] : 0.0f, k + 2 < end ? row[k + 2] : 0.0f,
                       k + 3 < end ? row[k + 3] : 0.0f);
}

__device__ __forceinline__ bool tiled_aligned(const void* p) { return (reinterpret_cast<size_t>(p) & 15) == 0; }

// c (M, N) = a (M, K) @ op(b) + bias (bias may be NULL), all row-major. blockIdx.z picks one of a
// batch of such products, each slice contiguous (attention's (b, h) slices; 1 for matmul_forward).
// Launched with (BM / TM) * (BN / TN) threads.
//
// A thread's TM x TN outputs are not one block of c but groups of 4 x 4, strided by what the
// block's threads cover together (64 rows or columns for 16 threads of 4): its shared-memory reads
// are then float4s that a warp's threads take side by side (no bank conflict), and a warp's
// stores to a row of c are 256 contiguous bytes.
template <int BM, int BN, int TM, int TN, TiledLayout LAYOUT, TiledCausal CAUSAL>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
tiled_matmul_kernel(float* c, const float* a, const float* b, const float* bias, int M, int N, int K) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int THREAD_COLS = BN / TN;
    constexpr int THREAD_ROWS = BM / TM;
    constexpr int ROW_STRIDE = THREAD_ROWS * 4;  // between a thread's groups of 4 rows
    constexpr int COL_STRIDE = THREAD_COLS * 4;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "register tiles are read from shared memory as float4");
    static_assert(TILED_BK % 4 == 0 && BN % 4 == 0, "tiles are loaded from global memory as float4");
    // k-major, so that a thread's 4 rows of a (and 4 columns of b) for one k are one float4.
    __shared__ __align__(16) float a_tile[TILED_BK][BM + TILED_PAD];
    __shared__ __align__(16) float b_tile[TILED_BK][BN + TILED_PAD];

    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    if (CAUSAL == TiledCausal::SKIP_FUTURE_TILES && col0 > row0 + BM - 1) return;  // the whole block leaves
    const int k_end = CAUSAL == TiledCausal::STOP_AT_DIAGONAL ? min(K, row0 + BM) : K;

    a += (size_t)blockIdx.z * M * K;
    b += (size_t)blockIdx.z * N * K;
    c += (size_t)blockIdx.z * M * N;
    // 16-byte loads and stores where every row starts 16-byte aligned; ragged shapes take the scalar path.
    const bool a_vec = K % 4 == 0 && tiled_aligned(a);
    const bool b_vec = (LAYOUT == TiledLayout::B_IS_N_BY_K ? K % 4 == 0 : N % 4 == 0) && tiled_aligned(b);
    const bool c_vec = N % 4 == 0 && tiled_aligned(c);
    const int tx = threadIdx.x % THREAD_COLS;
    const int ty = threadIdx.x / THREAD_COLS;

    float acc[TM][TN] = {};
    for (int k0 = 0; k0 < k_end; k0 += TILED_BK) {
        // A row's TILED_BK elements are TILED_BK / 4 float4s; consecutive threads take consecutive ones.
        for (int e = threadIdx.x; e < BM * (TILED_BK / 4); e += THREADS) {
            int r = e / (TILED_BK / 4), kk = (e % (TILED_BK / 4)) * 4;
            float4 v = row0 + r < M ? tiled_load4(a + (size_t)(row0 + r) * K, k0 + kk, K, a_vec)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            a_tile[kk][r] = v.x; a_tile[kk + 1][r] = v.y; a_tile[kk + 2][r] = v.z; a_tile[kk + 3][r] = v.w;
        }
        if (LAYOUT == TiledLayout::B_IS_N_BY_K) {
            for (int e = threadIdx.x; e < BN * (TILED_BK / 4); e += THREADS) {
                int n = e / (TILED_BK / 4), kk = (e % (TILED_BK / 4)) * 4;
                float4 v = col0 + n < N ? tiled_load4(b + (size_t)(col0 + n) * K, k0 + kk, K, b_vec)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                b_tile[kk][n] = v.x; b_tile[kk + 1][n] = v.y; b_tile[kk + 2][n] = v.z; b_tile[kk + 3][n] = v.w;
            }
        } else {
            for (int e = threadIdx.x; e < TILED_BK * (BN / 4); e += THREADS) {
                int kk = e / (BN / 4), n = (e % (BN / 4)) * 4;
                float4 v = k0 + kk < K ? tiled_load4(b + (size_t)(k0 + kk) * N + col0, n, N - col0, b_vec)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                *reinterpret_cast<float4*>(&b_tile[kk][n]) = v;
            }
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILED_BK; kk++) {
            float a_regs[TM], b_regs[TN];
            #pragma unroll
            for (int g = 0; g < TM / 4; g++)
                *reinterpret_cast<float4*>(&a_regs[g * 4]) =
                    *reinterpret_cast<const float4*>(&a_tile[kk][g * ROW_STRIDE + ty * 4]);
            #pragma unroll
            for (int g = 0; g < TN / 4; g++)
                *reinterpret_cast<float4*>(&b_regs[g * 4]) =
                    *reinterpret_cast<const float4*>(&b_tile[kk][g * COL_STRIDE + tx * 4]);
            #pragma unroll
            for (int i = 0; i < TM; i++)
                #pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a_regs[i] * b_regs[j];
        }
        __syncthreads();  // the next tiles overwrite what every thread just read
    }

    #pragma unroll
    for (int i = 0; i < TM; i++) {
        const int row = row0 + (i / 4) * ROW_STRIDE + ty * 4 + i % 4;
        if (row >= M) continue;
        float* c_row = c + (size_t)row * N;
        #pragma unroll
        for (int g = 0; g < TN / 4; g++) {
            const int col = col0 + g * COL_STRIDE + tx * 4;
            float out[4];
            #pragma unroll
            for (int e = 0; e < 4; e++)
                out[e] = acc[i][g * 4 + e] + (bias != nullptr && col + e < N ? bias[col + e] : 0.0f);
            if (c_vec && col + 3 < N) {
                *reinterpret_cast<float4*>(c_row + col) = make_float4(out[0], out[1], out[2], out[3]);
            } else {
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    if (col + e < N) c_row[col + e] = out[e];
            }
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
