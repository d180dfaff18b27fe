#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "../utils/cuda_utils.cuh"

// one warp per row, and only one read of the row for the statistics:
// var(x) = mean(x**2) - mean(x)**2 so sum(x) and sum(x**2) can be accumulated together
__global__ void layernorm_forward_kernel4(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                          const float* __restrict__ inp, const float* __restrict__ weight,
                                          const float* __restrict__ bias, int N, int C) {
    namespace cg = cooperative_groups;
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (idx >= N) {
        return;
    }

    // the row of input that this group of threads is responsible for
    const float* x = inp + idx * C;

    // thread coarsening through the row, reduce the sum in series
    float sum = 0.0f;   // stores sum(x)
    float sum2 = 0.0f;  // stores sum(x**2)
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        float xi = x[i];
        sum += xi;
        sum2 += xi * xi;
    }
    // warp-level reduction at the end
    sum = cg::reduce(warp, sum, cg::plus<float>{});    // sum(x)
    sum2 = cg::reduce(warp, sum2, cg::plus<float>{});  // sum(x**2)
    sum /= C;   // mean(x)
    sum2 /= C;  // mean(x**2)

    // mean, var, rstd
    float m = sum;
    float var = sum2 - sum * sum;
    float s = rsqrtf(var + 1e-5f);

    // store the mean and rstd for the backward pass
    if (warp.thread_rank() == 0) {
        mean[idx] = m;
        rstd[idx] = s;
    }
    // final normalization and scaling by weight/bias
    float* o = out + idx * C;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) {
        float n = s * (x[c] - m);
        o[c] = n * weight[c] + bias[c];
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    const int N = B * T;
    const int block_size = 256;  // 8 warps, so 8 rows per block
    const int grid_size = CEIL_DIV(N * 32, block_size);
    layernorm_forward_kernel4<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
