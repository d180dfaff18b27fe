#ifndef MATMUL_CUH
#define MATMUL_CUH

#include <cstdint>

#include "../utils/cuda_utils.cuh"

// op_15, raw PTX tensor-core math: wmma bypassed for mma.sync.aligned.m16n8k8 with TF32 inputs, written as inline
// PTX. A warp computes a 16 x 8 tile of out, K in steps of 8; each lane holds the fragment elements the PTX ISA
// assigns it (group = lane / 4, thread = lane % 4):
//   a0 (group, thread), a1 (group + 8, thread), a2 (group, thread + 4), a3 (group + 8, thread + 4)   of inp's tile
//   b0 (k = thread, n = group), b1 (k = thread + 4, n = group)                                         of weight^T
//   d0, d1 (group, 2 thread + 0/1), d2, d3 (group + 8, 2 thread + 0/1)                                 of out's tile
// Elements past M, OC or C are zero. Inputs are rounded to TF32 (cvt.rna), the products summed in FP32.
constexpr int MMA_M = 16;
constexpr int MMA_N = 8;
constexpr int MMA_K = 8;
constexpr int MMA_WARPS = 4;  // per block, side by side along OC

__device__ inline uint32_t to_tf32(float x) {
    uint32_t rounded;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(rounded) : "f"(x));
    return rounded;
}

// out (M, OC) = inp (M, C) @ weight (OC, C)^T + bias, where M = B * T.
__global__ void matmul_forward_kernel(float* out, const float* inp, const float* weight, const float* bias, int M,
                                      int C, int OC) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int group = lane / 4, thread = lane % 4;
    int m0 = blockIdx.y * MMA_M;
    int n0 = (blockIdx.x * MMA_WARPS + warp) * MMA_N;
    if (n0 >= OC) return;  // the whole warp: mma.sync needs all 32 lanes
    int row_lo = m0 + group, row_hi = m0 + group + 8, col = n0 + group;
    auto at = [&](const float* p, int row, int rows, int k) {
        return (row < rows && k < C) ? p[(size_t)row * C + k] : 0.0f;
    };
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    for (int k0 = 0; k0 < C; k0 += MMA_K) {
        uint32_t a0 = to_tf32(at(inp, row_lo, M, k0 + thread)), a1 = to_tf32(at(inp, row_hi, M, k0 + thread));
        uint32_t a2 = to_tf32(at(inp, row_lo, M, k0 + thread + 4)), a3 = to_tf32(at(inp, row_hi, M, k0 + thread + 4));
        uint32_t b0 = to_tf32(at(weight, col, OC, k0 + thread)), b1 = to_tf32(at(weight, col, OC, k0 + thread + 4));
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    int c = n0 + 2 * thread;
    auto store = [&](int row, int column, float value) {
        if (row < M && column < OC) out[(size_t)row * OC + column] = value + (bias != nullptr ? bias[column] : 0.0f);
    };
    store(row_lo, c, d0);
    store(row_lo, c + 1, d1);
    store(row_hi, c, d2);
    store(row_hi, c + 1, d3);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    int M = B * T;
    if (M == 0 || OC == 0) return;
    dim3 grid(CEIL_DIV(CEIL_DIV(OC, MMA_N), MMA_WARPS), CEIL_DIV(M, MMA_M));
    matmul_forward_kernel<<<grid, 32 * MMA_WARPS>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
