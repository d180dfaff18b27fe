#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int rows, int C) {
    // TODO: normalise each of the `rows` rows of length C:
    //   m = mean(x), v = mean((x - m)^2) (biased), s = 1 / sqrt(v + 1e-5),
    //   out = (x - m) * s * weight + bias; also store mean[row] = m and rstd[row] = s.
    // One warp per row with shuffle reductions (__shfl_xor_sync) is a good layout. Computing the
    // variance from x - m, rather than as E[x^2] - m^2, avoids cancellation on low-variance rows.
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    // TODO: launch layernorm_forward_kernel over the B * T rows, then check the launch with
    // cudaCheck(cudaGetLastError()).
}

#endif  // LAYERNORM_CUH
