#ifndef MATMUL_TILED_CUH
#define MATMUL_TILED_CUH

#include <math.h>
#include <cuda_runtime.h>

// As the textbook writes it (Kirk and Hwu's Mds/Nds, phases counted with ceil), one thread per output.
template <int TILE_WIDTH>
__global__ void MatrixMulKernel(const float* M, const float* N, float* P, int Height, int Width, int Common) {
    __shared__ float Mds[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Nds[TILE_WIDTH][TILE_WIDTH];
    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int Row = by * TILE_WIDTH + ty;
    int Col = bx * TILE_WIDTH + tx;
    float Pvalue = 0;
    for (int ph = 0; ph < ceil(Common / (float)TILE_WIDTH); ++ph) {
        if (Row < Height && ph * TILE_WIDTH + tx < Common)
            Mds[ty][tx] = M[Row * Common + ph * TILE_WIDTH + tx];
        else
            Mds[ty][tx] = 0;
        if (ph * TILE_WIDTH + ty < Common && Col < Width)
            Nds[ty][tx] = N[(ph * TILE_WIDTH + ty) * Width + Col];
        else
            Nds[ty][tx] = 0;
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) Pvalue += Mds[ty][k] * Nds[k][tx];
        __syncthreads();
    }
    if (Row < Height && Col < Width) P[Row * Width + Col] = Pvalue;
}

template <int TILE_WIDTH>
void run(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH);
    dim3 dimGrid(ceil(N / (float)TILE_WIDTH), ceil(M / (float)TILE_WIDTH));
    MatrixMulKernel<TILE_WIDTH><<<dimGrid, dimBlock>>>(A, B, C, M, N, K);
}

void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K, int tile) {
    if (tile == 8) run<8>(A, B, C, M, N, K);
    else if (tile == 16) run<16>(A, B, C, M, N, K);
    else run<32>(A, B, C, M, N, K);
}

#endif
