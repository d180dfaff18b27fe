#ifndef ATTENTION_CUH
#define ATTENTION_CUH

// FlashAttention (Dao et al. 2022), Algorithm 1, ported line by line: the outer loop over K/V blocks, the inner
// loop over Q blocks, O, l and m kept in global memory and updated after every block. One thread per query row.

#include "../utils/cuda_utils.cuh"

#define Bc 32
#define Br 32
#define MAX_D 64  // GPT-2's head size; four 32 x 128 tiles would not fit in 48 KB of shared memory

__global__ void permute_kernel(float* q, float* k, float* v, const float* inp, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int b = idx / (NH * N * d);
        int rest = idx % (NH * N * d);
        int nh_ = rest / (N * d);
        rest = rest % (N * d);
        int n = rest / d;
        int d_ = rest % d;
        int inp_idx = (b * N * 3 * NH * d) + (n * 3 * NH * d) + (0 * NH * d) + (nh_ * d) + d_;
        q[idx] = inp[inp_idx];
        k[idx] = inp[inp_idx + NH * d];
        v[idx] = inp[inp_idx + 2 * (NH * d)];
    }
}

__global__ void unpermute_kernel(float* inp, float* out, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int b = idx / (NH * N * d);
        int rest = idx % (NH * N * d);
        int nh_ = rest / (N * d);
        rest = rest % (N * d);
        int n = rest / d;
        int d_ = rest % d;
        int other_idx = (b * NH * N * d) + (n * NH * d) + (nh_ * d) + d_;
        out[other_idx] = inp[idx];
    }
}

// grid: one block per (batch, head); block: Br threads, thread tx owns row tx of the current Q block.
__global__ void flash_forward_kernel(const float* Q, const float* K, const float* V, int N, int d, int Tc, int Tr,
                                     float softmax_scale, float* l, float* m, float* O) {
    int tx = threadIdx.x;
    int bh = blockIdx.x;
    int qkv_offset = bh * N * d;
    int lm_offset = bh * N;

    __shared__ float Qi[Br * MAX_D];
    __shared__ float Kj[Bc * MAX_D];
    __shared__ float Vj[Bc * MAX_D];
    __shared__ float S[Br * Bc];

    for (int j = 0; j < Tc; j++) {
        // Load Kj, Vj to SRAM (line 6)
        for (int x = 0; x < d; x++) {
            int row = j * Bc + tx;
            Kj[tx * d + x] = row < N ? K[qkv_offset + row * d + x] : 0.0f;
            Vj[tx * d + x] = row < N ? V[qkv_offset + row * d + x] : 0.0f;
        }
        __syncthreads();

        for (int i = 0; i < Tr; i++) {
            // causal: a Q block entirely before this K block sees none of its keys
            if (i < j) continue;
            int row = i * Br + tx;
            // Load Qi, Oi, li, mi (line 8)
            for (int x = 0; x < d; x++) Qi[tx * d + x] = row < N ? Q[qkv_offset + row * d + x] : 0.0f;
            if (row < N) {
                float row_m_prev = m[lm_offset + row];
                float row_l_prev = l[lm_offset + row];

                // S = QK^T, row_m = rowmax(S) (lines 9-10)
                float row_m = -INFINITY;
                for (int y = 0; y < Bc; y++) {
                    int col = j * Bc + y;
                    float sum = 0;
                    for (int x = 0; x < d; x++) sum += Qi[tx * d + x] * Kj[y * d + x];
                    sum *= softmax_scale;
                    if (col > row || col >= N) sum = -INFINITY;  // causal mask
                    S[tx * Bc + y] = sum;
                    if (sum > row_m) row_m = sum;
                }

                // P = exp(S - row_m), row_l = rowsum(P) (line 10)
                float row_l = 0;
                for (int y = 0; y < Bc; y++) {
                    S[tx * Bc + y] = expf(S[tx * Bc + y] - row_m);
                    row_l += S[tx * Bc + y];
                }

                // Compute new m and l (line 11)
                float row_m_new = fmaxf(row_m_prev, row_m);
                float row_l_new = expf(row_m_prev - row_m_new) * row_l_prev + expf(row_m - row_m_new) * row_l;

                // Write O, l, m to HBM (lines 12-13)
                for (int x = 0; x < d; x++) {
                    float pv = 0;  // Pij * Vj
                    for (int y = 0; y < Bc; y++) pv += S[tx * Bc + y] * Vj[y * d + x];
                    O[qkv_offset + row * d + x] = (1 / row_l_new)
                        * ((row_l_prev * expf(row_m_prev - row_m_new) * O[qkv_offset + row * d + x])
                           + (expf(row_m - row_m_new) * pv));
                }
                m[lm_offset + row] = row_m_new;
                l[lm_offset + row] = row_l_new;
            }
        }
        __syncthreads();
    }
}

__global__ void fill_kernel(float* x, float value, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] = value;
}

void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    float *q, *k, *v;
    q = qkvr + 0 * B * T * C;
    k = qkvr + 1 * B * T * C;
    v = qkvr + 2 * B * T * C;
    int total_threads = B * NH * T * HS;
    int num_blocks = CEIL_DIV(total_threads, 256);
    permute_kernel<<<num_blocks, 256>>>(q, k, v, inp, B, T, NH, HS);

    // O accumulates in inp (free after the permute), l and m in their own buffers
    float* O = inp;
    float *l, *m;
    cudaCheck(cudaMalloc(&l, B * NH * T * sizeof(float)));
    cudaCheck(cudaMalloc(&m, B * NH * T * sizeof(float)));
    cudaCheck(cudaMemset(O, 0, (size_t)B * NH * T * HS * sizeof(float)));
    cudaCheck(cudaMemset(l, 0, B * NH * T * sizeof(float)));
    fill_kernel<<<CEIL_DIV(B * NH * T, 256), 256>>>(m, -INFINITY, B * NH * T);

    int Tc = CEIL_DIV(T, Bc);
    int Tr = CEIL_DIV(T, Br);
    float softmax_scale = 1.0 / sqrt(HS);
    flash_forward_kernel<<<B * NH, Br>>>(q, k, v, T, HS, Tc, Tr, softmax_scale, l, m, O);
    cudaCheck(cudaGetLastError());

    unpermute_kernel<<<num_blocks, 256>>>(O, out, B, T, NH, HS);
    cudaCheck(cudaFree(l));
    cudaCheck(cudaFree(m));
}

#endif  // ATTENTION_CUH
