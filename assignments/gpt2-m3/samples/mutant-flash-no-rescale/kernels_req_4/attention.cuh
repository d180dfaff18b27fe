#ifndef ATTENTION_CUH
#define ATTENTION_CUH

// FlashAttention-2 (Dao 2023), Algorithm 1, forward (MUTANT: the running output is not rescaled when the
// running max changes; l is): the Q block is the outer loop (one warp per query row here),
// K/V blocks stream through shared memory, the output stays unnormalised in registers and is divided by l once at
// the end. Lane j scores key j of the tile; lane c owns output columns c, c + 32, c + 64, c + 96.

#include "../utils/cuda_utils.cuh"

#define WARPS 8      // query rows per block
#define TILE 32      // keys per K/V tile: one per lane
#define MAX_HS 128

__global__ void permute_qkv(float* q, float* k, float* v, const float* inp, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T * HS) return;
    int b = idx / (NH * T * HS);
    int h = (idx / (T * HS)) % NH;
    int t = (idx / HS) % T;
    int d = idx % HS;
    int C = NH * HS;
    int src = b * T * 3 * C + t * 3 * C + h * HS + d;
    q[idx] = inp[src];
    k[idx] = inp[src + C];
    v[idx] = inp[src + 2 * C];
}

__global__ void flash2_forward(float* out, const float* q, const float* k, const float* v, int T, int NH, int HS,
                               float scale) {
    __shared__ float Qs[WARPS][MAX_HS];
    __shared__ float Ks[TILE][MAX_HS + 1];
    __shared__ float Vs[TILE][MAX_HS];

    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y;
    int row = blockIdx.x * WARPS + warp;
    bool valid = row < T;
    const float* qh = q + (size_t)bh * T * HS;
    const float* kh = k + (size_t)bh * T * HS;
    const float* vh = v + (size_t)bh * T * HS;

    for (int d = lane; d < HS; d += 32) Qs[warp][d] = valid ? qh[row * HS + d] : 0.0f;

    float m = -INFINITY, l = 0.0f;
    float o[MAX_HS / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    int last_row = min(T - 1, blockIdx.x * WARPS + WARPS - 1);
    for (int k0 = 0; k0 <= last_row; k0 += TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < TILE * HS; e += blockDim.x) {
            int j = e / HS, d = e % HS;
            Ks[j][d] = k0 + j < T ? kh[(k0 + j) * HS + d] : 0.0f;
            Vs[j][d] = k0 + j < T ? vh[(k0 + j) * HS + d] : 0.0f;
        }
        __syncthreads();

        int key = k0 + lane;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += Qs[warp][d] * Ks[lane][d];
        s = (valid && key <= row) ? s * scale : -INFINITY;

        float tile_max = s;
        for (int off = 16; off > 0; off /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, off));
        float m_new = fmaxf(m, tile_max);
        if (m_new == -INFINITY) continue;  // a row past T, or a tile wholly after the row: nothing to add
        float p = expf(s - m_new);
        float tile_sum = p;
        for (int off = 16; off > 0; off /= 2) tile_sum += __shfl_xor_sync(0xffffffff, tile_sum, off);
        float correction = expf(m - m_new);
        l = l * correction + tile_sum;
        m = m_new;
        for (int j = 0; j < TILE; j++) {
            float pj = __shfl_sync(0xffffffff, p, j);
            for (int c = 0; c < MAX_HS / 32; c++) {
                int d = lane + 32 * c;
                if (d < HS) o[c] += pj * Vs[j][d];
            }
        }
    }
    if (!valid) return;
    int b = bh / NH, h = bh % NH;
    for (int c = 0; c < MAX_HS / 32; c++) {
        int d = lane + 32 * c;
        if (d < HS) out[((size_t)b * T + row) * NH * HS + h * HS + d] = o[c] / l;
    }
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    float* q = qkvr;
    float* k = qkvr + B * T * C;
    float* v = qkvr + 2 * B * T * C;
    permute_qkv<<<CEIL_DIV(B * T * C, 256), 256>>>(q, k, v, inp, B, T, NH, HS);
    dim3 grid(CEIL_DIV(T, WARPS), B * NH);
    flash2_forward<<<grid, WARPS * 32>>>(out, q, k, v, T, NH, HS, 1.0f / sqrtf(HS));
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_CUH
