#ifndef MATMUL_TILED_CUH
#define MATMUL_TILED_CUH

#include <cuda_runtime.h>

#define TILE 16  // the block edge the lab started with; the tile now comes from the caller

// One kernel for every tile edge: the tile is a run-time argument, and both tiles live in dynamic shared memory,
// sized at launch (2 * tile * tile floats), A's tile first and B's after it.
__global__ void matmul_shared(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    extern __shared__ float smem[];
    float* tileA = smem;
    float* tileB = smem + tile * tile;
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * tile + ty;
    int col = blockIdx.x * tile + tx;
    float value = 0.0f;
    for (int k0 = 0; k0 < K; k0 += tile) {
        tileA[ty * tile + tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        tileB[ty * tile + tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < tile; k++) value += tileA[ty * tile + k] * tileB[k * tile + tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = value;
}

void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    if (tile <= 0) tile = TILE;
    dim3 block(tile, tile);
    dim3 grid((N + tile - 1) / tile, (M + tile - 1) / tile);
    size_t shared = 2 * tile * tile * sizeof(float);
    matmul_shared<<<grid, block, shared>>>(A, B, C, M, N, K, tile);
}

#endif
