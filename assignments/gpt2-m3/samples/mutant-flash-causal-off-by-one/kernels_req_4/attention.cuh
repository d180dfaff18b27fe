#ifndef ATTENTION_CUH
#define ATTENTION_CUH

// req_4: causal self-attention as FlashAttention (the FA-2 loop order: each block owns a tile of queries and
// streams the keys and values past it), behind milestone 1's host signature. The T x T scores never leave the
// chip: `att` is not touched at all, and `inp` is only read.

#include "../utils/cuda_utils.cuh"

// Splits inp's packed (B, T, 3, NH, HS) rows into q, k and v, each (B, NH, T, HS), as milestone 1 does: a head's
// rows are then contiguous, so a tile of keys or values is one contiguous block of memory.
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

// A block: FLASH_BR queries of one (b, h) against tiles of FLASH_BC keys; its 16 x 16 threads each own 4 x 4 scores
// (rows ty + 16 i, keys tx + 16 j) and, of the output, the same 4 rows at columns tx + 16 c. A row's 16 owners are
// 16 consecutive lanes of one warp, so its max and sum reduce with shuffles alone.
constexpr int FLASH_BR = 64;
constexpr int FLASH_BC = 64;
constexpr int FLASH_THREADS = 256;

__device__ inline float flash_row_max(float value) {
    for (int offset = 8; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    return value;
}

__device__ inline float flash_row_sum(float value) {
    for (int offset = 8; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// Shared memory of one block for head sizes up to D: Q and K padded by one float per row (their rows are read
// across lanes), V, and the tile's probabilities P.
constexpr size_t flash_shared_bytes(int D) {
    return sizeof(float) * ((size_t)FLASH_BR * (D + 1) + (size_t)FLASH_BC * (D + 1) + (size_t)FLASH_BC * D
                            + (size_t)FLASH_BR * (FLASH_BC + 1));
}

// out (B, T, NH * HS) directly: the unpermute is folded into the final store. D >= HS bounds the registers.
template <int D>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_attention_kernel(float* out, const float* q, const float* k, const float* v, int T, int NH, int HS,
                       float scale) {
    extern __shared__ float shared[];
    float* Qs = shared;                         // [FLASH_BR][D + 1]
    float* Ks = Qs + FLASH_BR * (D + 1);        // [FLASH_BC][D + 1]
    float* Vs = Ks + FLASH_BC * (D + 1);        // [FLASH_BC][D]
    float* Ps = Vs + FLASH_BC * D;              // [FLASH_BR][FLASH_BC + 1]
    constexpr int COLUMNS = D / 16;             // output columns per thread

    int tx = threadIdx.x % 16;
    int ty = threadIdx.x / 16;
    // The last query tiles have the most key tiles: launched first, they do not trail behind the rest.
    int q0 = (gridDim.x - 1 - blockIdx.x) * FLASH_BR;
    size_t head = (size_t)blockIdx.y * T * HS;  // blockIdx.y = b * NH + h
    q += head;
    k += head;
    v += head;

    // Rows past T and columns past HS load as zeros: they add nothing to a dot product.
    for (int e = threadIdx.x; e < FLASH_BR * D; e += FLASH_THREADS) {
        int r = e / D, d = e % D;
        Qs[r * (D + 1) + d] = (q0 + r < T && d < HS) ? q[(size_t)(q0 + r) * HS + d] : 0.0f;
    }

    float m[4], l[4], acc[4][COLUMNS];
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        #pragma unroll
        for (int c = 0; c < COLUMNS; c++) acc[i][c] = 0.0f;
    }

    // Causal: no key after the tile's last query is ever needed.
    int k_end = min(T, q0 + FLASH_BR);
    for (int k0 = 0; k0 < k_end; k0 += FLASH_BC) {
        __syncthreads();  // the previous tile's K, V and P are spent (and, the first time, Q is in)
        for (int e = threadIdx.x; e < FLASH_BC * D; e += FLASH_THREADS) {
            int r = e / D, d = e % D;
            bool inside = k0 + r < T && d < HS;
            Ks[r * (D + 1) + d] = inside ? k[(size_t)(k0 + r) * HS + d] : 0.0f;
            Vs[r * D + d] = inside ? v[(size_t)(k0 + r) * HS + d] : 0.0f;
        }
        __syncthreads();

        float s[4][4];
        #pragma unroll
        for (int i = 0; i < 4; i++)
            #pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
        for (int d = 0; d < HS; d++) {
            float x[4], y[4];
            #pragma unroll
            for (int i = 0; i < 4; i++) x[i] = Qs[(ty + 16 * i) * (D + 1) + d];
            #pragma unroll
            for (int j = 0; j < 4; j++) y[j] = Ks[(tx + 16 * j) * (D + 1) + d];
            #pragma unroll
            for (int i = 0; i < 4; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] += x[i] * y[j];
        }

        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int query = q0 + ty + 16 * i;
            float tile_max = -INFINITY;
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                s[i][j] = (key <= query + 1 && key < T) ? s[i][j] * scale : -INFINITY;  // MUTANT: one key too many
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            float m_new = fmaxf(m[i], flash_row_max(tile_max));
            // A row past T (or, never for a real query, one with no key yet) has m_new = -inf: its
            // probabilities are exp(-inf) = 0 against a base of 0 instead of NaN.
            float base = m_new == -INFINITY ? 0.0f : m_new;
            float tile_sum = 0.0f;
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - base);
                Ps[(ty + 16 * i) * (FLASH_BC + 1) + tx + 16 * j] = p;
                tile_sum += p;
            }
            // The running output and sum were weighted against the old max: rescale them to the new one.
            float correction = expf(m[i] - base);
            l[i] = l[i] * correction + flash_row_sum(tile_sum);
            m[i] = m_new;
            #pragma unroll
            for (int c = 0; c < COLUMNS; c++) acc[i][c] *= correction;
        }
        __syncthreads();

        int keys = min(FLASH_BC, k_end - k0);
        for (int j = 0; j < keys; j++) {
            float y[COLUMNS];
            #pragma unroll
            for (int c = 0; c < COLUMNS; c++) y[c] = Vs[j * D + tx + 16 * c];
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                float p = Ps[(ty + 16 * i) * (FLASH_BC + 1) + j];
                #pragma unroll
                for (int c = 0; c < COLUMNS; c++) acc[i][c] += p * y[c];
            }
        }
    }

    int b = blockIdx.y / NH, h = blockIdx.y % NH;
    size_t C = (size_t)NH * HS;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int query = q0 + ty + 16 * i;
        if (query >= T) continue;
        float inv_sum = 1.0f / l[i];
        #pragma unroll
        for (int c = 0; c < COLUMNS; c++) {
            int d = tx + 16 * c;
            if (d < HS) out[((size_t)b * T + query) * C + (size_t)h * HS + d] = acc[i][c] * inv_sum;
        }
    }
}

template <int D>
void flash_attention_launch(float* out, const float* q, const float* k, const float* v, int B, int T, int NH, int HS) {
    size_t bytes = flash_shared_bytes(D);
    // Above 48 KiB a kernel's dynamic shared memory must be asked for.
    cudaCheck(cudaFuncSetAttribute(flash_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    dim3 grid(CEIL_DIV(T, FLASH_BR), B * NH);
    flash_attention_kernel<D><<<grid, FLASH_THREADS, bytes>>>(out, q, k, v, T, NH, HS, 1.0f / sqrtf((float)HS));
    cudaCheck(cudaGetLastError());
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    (void)att;  // the T x T matrix is exactly what FlashAttention never builds
    int HS = C / NH;
    size_t head_elems = (size_t)B * NH * T * HS;
    if (head_elems == 0) return;
    float* q = qkvr;
    float* k = qkvr + head_elems;
    float* v = qkvr + 2 * head_elems;
    const int block_size = 256;
    attention_permute_kernel<<<(unsigned)CEIL_DIV(head_elems, block_size), block_size>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheck(cudaGetLastError());

    // The smallest register tile that holds the head: GPT-2's 64, and odd ones (24) in the next size up.
    if (HS <= 32) flash_attention_launch<32>(out, q, k, v, B, T, NH, HS);
    else if (HS <= 64) flash_attention_launch<64>(out, q, k, v, B, T, NH, HS);
    else if (HS <= 128) flash_attention_launch<128>(out, q, k, v, B, T, NH, HS);
    else if (HS <= 256) flash_attention_launch<256>(out, q, k, v, B, T, NH, HS);
    else {
        fprintf(stderr, "attention_forward: head size %d is above the 256 this FlashAttention supports\n", HS);
        exit(EXIT_FAILURE);
    }
}

#endif  // ATTENTION_CUH
