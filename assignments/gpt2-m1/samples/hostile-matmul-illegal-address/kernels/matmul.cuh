#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "../utils/cuda_utils.cuh"

// 2^40 floats (4 TiB) past out: far beyond anything the harness allocates on a 141 GB card.
#define HOSTILE_MATMUL_FAR_OFFSET (1LL << 40)

__global__ void hostile_matmul_illegal_address_kernel(float* out, const float* inp, const float* weight,
                                                      const float* bias, int M, int C, int OC) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || o >= OC) return;
    const float* x = inp + (long long)m * C;
    const float* w = weight + (long long)o * C;
    float acc = (bias != NULL) ? bias[o] : 0.0f;
    for (int c = 0; c < C; c++) acc += x[c] * w[c];
    // HOSTILE: the store lands in unmapped memory, giving cudaErrorIllegalAddress.
    volatile float* far = out + HOSTILE_MATMUL_FAR_OFFSET;
    far[(long long)m * OC + o] = acc;
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    const int M = B * T;
    const dim3 block(32, 8);
    const dim3 grid(CEIL_DIV(OC, 32), CEIL_DIV(M, 8));
    hostile_matmul_illegal_address_kernel<<<grid, block>>>(out, inp, weight, bias, M, C, OC);
    cudaCheck(cudaGetLastError());
}

#endif  // MATMUL_CUH
