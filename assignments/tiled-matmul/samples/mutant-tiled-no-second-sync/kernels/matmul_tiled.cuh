#ifndef MATMUL_TILED_CUH
#define MATMUL_TILED_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// Tiled matmul: still one thread per C[i][j], but a TILE x TILE block stages a TILE x TILE tile of A and one of B
// in __shared__ memory per step along K, so each value read from global memory is used TILE times (by the TILE
// threads of its row or column) instead of once. Two barriers per step: after the loads (the tile is whole
// before anyone reads it) and after the products (no one overwrites it while others still read it).
template <int TILE>
__global__ void matmul_tiled_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int ty = threadIdx.y, tx = threadIdx.x;
    int i = blockIdx.y * TILE + ty;
    int j = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        // Outside A, B or K: zero, so that ragged edges add nothing. Every thread loads, also those with no output.
        int ka = t * TILE + tx, kb = t * TILE + ty;
        As[ty][tx] = (i < M && ka < K) ? A[(size_t)i * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && j < N) ? B[(size_t)kb * N + j] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) sum += As[ty][k] * Bs[k][tx];
        // (no second __syncthreads(): a fast warp loads the next tile while others still read this one)
    }
    if (i < M && j < N) C[(size_t)i * N + j] = sum;
}

template <int TILE>
void launch_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled_kernel<TILE><<<grid, block>>>(A, B, C, M, N, K);
}

// C (M, N) = A (M, K) @ B (K, N), row-major float32 on the device, with tile x tile thread blocks: 8, 16 or 32
// (32 x 32 = 1024 threads, the most a block may have). The tile is a template argument so that the tiles' size
// and the inner loop's trip count are known to the compiler.
void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    switch (tile) {
        case 8: launch_tiled<8>(A, B, C, M, N, K); break;
        case 16: launch_tiled<16>(A, B, C, M, N, K); break;
        case 32: launch_tiled<32>(A, B, C, M, N, K); break;
        default: fprintf(stderr, "matmul_tiled: tile %d is not one of 8, 16, 32\n", tile); abort();
    }
}

#endif  // MATMUL_TILED_CUH
