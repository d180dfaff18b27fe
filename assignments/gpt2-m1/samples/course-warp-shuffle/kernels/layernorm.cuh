#ifndef LAYERNORM_CUH
#define LAYERNORM_CUH

#include "../utils/cuda_utils.cuh"

#define LAYERNORM_BLOCK_SIZE 256

// sum over the warp with shuffles, lane 0 ends up with the total
__device__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val += __shfl_down_sync(0xffffffff, val, offset);
    }
    return val;
}

// sum over the whole block: warps first, then warp 0 adds up the per-warp sums from shared memory.
// every thread gets the result. shared needs one float per warp.
__device__ float blockReduceSum(float val, float* shared) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int num_warps = blockDim.x / 32;

    val = warpReduceSum(val);
    if (lane == 0) shared[warp] = val;
    __syncthreads();

    if (warp == 0) {
        val = (lane < num_warps) ? shared[lane] : 0.0f;
        val = warpReduceSum(val);
        if (lane == 0) shared[0] = val;
    }
    __syncthreads();
    float total = shared[0];
    __syncthreads();  // everyone has read shared[0] before it gets reused
    return total;
}

// one block per (b,t) row, two passes: mean first, then the variance around it
__global__ void layernorm_forward_kernel2(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    __shared__ float shared[LAYERNORM_BLOCK_SIZE / 32];
    int idx = blockIdx.x;  // the row
    int tid = threadIdx.x;
    const float* x = inp + idx * C;

    // mean
    float sum = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        sum += x[i];
    }
    float m = blockReduceSum(sum, shared) / C;

    // variance (biased, like the CPU code)
    float sumsq = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        float diff = x[i] - m;
        sumsq += diff * diff;
    }
    float v = blockReduceSum(sumsq, shared) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);

    float* out_idx = out + idx * C;
    for (int i = tid; i < C; i += blockDim.x) {
        float n = s * (x[i] - m);
        out_idx[i] = n * weight[i] + bias[i];
    }
    if (tid == 0) {
        mean[idx] = m;
        rstd[idx] = s;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    const int N = B * T;
    layernorm_forward_kernel2<<<N, LAYERNORM_BLOCK_SIZE>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

#endif  // LAYERNORM_CUH
