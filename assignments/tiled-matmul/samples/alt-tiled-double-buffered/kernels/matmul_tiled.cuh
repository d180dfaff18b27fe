#ifndef MATMUL_TILED_CUH
#define MATMUL_TILED_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// Double buffering: two pairs of tiles, the next step's loaded while this step's are read, one barrier per step.
// In step t the block reads buffer t % 2 and writes buffer (t + 1) % 2, which it last read in step t - 1: the
// barrier ending step t - 1 keeps those reads before these writes, and the one ending step t makes the writes
// visible before step t + 1 reads them.
template <int TILE>
__device__ __forceinline__ void load_tiles(float (*As)[TILE], float (*Bs)[TILE], const float* A, const float* B,
                                           int M, int N, int K, int i, int j, int t) {
    int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (i < M && ka < K) ? A[(size_t)i * K + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && j < N) ? B[(size_t)kb * N + j] : 0.0f;
}

template <int TILE>
__global__ void matmul_tiled_double_buffered(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[2][TILE][TILE];
    __shared__ float Bs[2][TILE][TILE];
    int i = blockIdx.y * TILE + threadIdx.y;
    int j = blockIdx.x * TILE + threadIdx.x;
    int steps = (K + TILE - 1) / TILE;
    float sum = 0.0f;
    if (steps > 0) load_tiles<TILE>(As[0], Bs[0], A, B, M, N, K, i, j, 0);
    __syncthreads();
    for (int t = 0; t < steps; t++) {
        int now = t & 1;
        if (t + 1 < steps) load_tiles<TILE>(As[now ^ 1], Bs[now ^ 1], A, B, M, N, K, i, j, t + 1);
#pragma unroll
        for (int k = 0; k < TILE; k++) sum += As[now][threadIdx.y][k] * Bs[now][k][threadIdx.x];
        __syncthreads();
    }
    if (i < M && j < N) C[(size_t)i * N + j] = sum;
}

template <int TILE>
static void launch(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled_double_buffered<TILE><<<grid, block>>>(A, B, C, M, N, K);
}

void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    switch (tile) {
        case 8: return launch<8>(A, B, C, M, N, K);
        case 16: return launch<16>(A, B, C, M, N, K);
        case 32: return launch<32>(A, B, C, M, N, K);
        default: fprintf(stderr, "tile %d not supported\n", tile); abort();
    }
}

#endif
