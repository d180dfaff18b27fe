#ifndef MATMUL_CUH
#define MATMUL_CUH

#include <cuda_pipeline.h>

#include "../utils/cuda_utils.cuh"

// op_17, an asynchronous memory pipeline: milestone 1's 16 x 16 shared tiles, double-buffered. While the block
// multiplies one pair of tiles, cp.async (__pipeline_memcpy_async: LDGSTS) copies the next pair from global into
// shared memory without passing through registers, so the loads of step k+1 overlap the math of step k.
constexpr int MATMUL_TILE = 16;

// out (M, OC) = inp (M, C) @ weight (OC, C)^T + bias, where M = B * T.
__global__ void matmul_forward_kernel(float* out, const float* inp, const float* weight, const float* bias, int M,
                                      int C, int OC) {
    __shared__ float inp_tile[2][MATMUL_TILE][MATMUL_TILE];
    __shared__ float weight_tile[2][MATMUL_TILE][MATMUL_TILE + 1];
    int row = blockIdx.y * MATMUL_TILE + threadIdx.y;
    int col = blockIdx.x * MATMUL_TILE + threadIdx.x;
    int weight_row = blockIdx.x * MATMUL_TILE + threadIdx.y;

    // Issue the copies of the tiles at k0 into buffer `stage`; past M, OC or C the element is zero, stored directly
    // (a copy from outside the tensors would read memory that is not ours).
    auto load = [&](int stage, int k0) {
        int k = k0 + threadIdx.x;
        float* a = &inp_tile[stage][threadIdx.y][threadIdx.x];
        float* b = &weight_tile[stage][threadIdx.y][threadIdx.x];
        if (row < M && k < C) __pipeline_memcpy_async(a, inp + (size_t)row * C + k, sizeof(float));
        else *a = 0.0f;
        if (weight_row < OC && k < C) __pipeline_memcpy_async(b, weight + (size_t)weight_row * C + k, sizeof(float));
        else *b = 0.0f;
        __pipeline_commit();
    };

    int steps = CEIL_DIV(C, MATMUL_TILE);
    float sum = 0.0f;
    if (steps > 0) load(0, 0);
    for (int step = 0; step < steps; step++) {
        if (step + 1 < steps) {
            load((step + 1) % 2, (step + 1) * MATMUL_TILE);
            __pipeline_wait_prior(1);  // this step's copies are done; the next step's may still be in flight
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();  // every thread's copies of this step are visible
        int stage = step % 2;
        for (int kk = 0; kk < MATMUL_TILE; kk++) sum += inp_tile[stage][threadIdx.y][kk] * weight_tile[stage][threadIdx.x][kk];
        __syncthreads();  // the copies issued next step overwrite this buffer
    }
    if (row < M && col < OC) out[(size_t)row * OC + col] = sum + (bias != nullptr ? bias[col] : 0.0f);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(OC, MATMUL_TILE), CEIL_DIV(M, MATMUL_TILE));
    matmul_forward_kernel<<<grid, dim3(MATMUL_TILE, MATMUL_TILE)>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
