#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// One thread per output (m, o), m = b*T + t.
// BUG: weight read as if it were (C, OC) row-major; it is (OC, C). Still in bounds.
__global__ void mutant_matmul_transposed_kernel(float* out, const float* inp, const float* weight, const float* bias,
                                  int M, int C, int OC) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || o >= OC) return;
    const float* x = inp + (long long)m * C;
    float acc = (bias != NULL) ? bias[o] : 0.0f;
    for (int c = 0; c < C; c++) acc += x[c] * weight[(long long)c * OC + o];
    out[(long long)m * OC + o] = acc;
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    const int M = B * T;
    const dim3 block(32, 8);
    const dim3 grid(CEIL_DIV(OC, 32), CEIL_DIV(M, 8));
    mutant_matmul_transposed_kernel<<<grid, block>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
