// The backward pass of Algorithm 1 in FlashAttention-2's order: outer loop over query blocks, inner loop over
// key blocks, with the forward's statistics folded into one logsumexp per row, L = m + log(l), so that
// P_ij = exp(S_ij - L_i). dK and dV accumulate in memory across query blocks.
#include "flash_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc) {
    std::fill(dK, dK + N * d, 0.0f);
    std::fill(dV, dV + N * d, 0.0f);
    std::vector<float> dq(d);
    for (int q_start = 0; q_start < N; q_start += Br) {
        const int rows = std::min(Br, N - q_start);
        for (int r = 0; r < rows; ++r) {
            const int i = q_start + r;
            const float L = m[i] + std::log(l[i]);
            float D = 0.0f;
            for (int k = 0; k < d; ++k) D += dO[i * d + k] * O[i * d + k];
            std::fill(dq.begin(), dq.end(), 0.0f);
            for (int kv_start = 0; kv_start < N; kv_start += Bc) {
                const int cols = std::min(Bc, N - kv_start);
                for (int c = 0; c < cols; ++c) {
                    const int j = kv_start + c;
                    float s = 0.0f, dp = 0.0f;
                    for (int k = 0; k < d; ++k) {
                        s += Q[i * d + k] * K[j * d + k];
                        dp += dO[i * d + k] * V[j * d + k];
                    }
                    const float p = std::exp(s - L);
                    const float ds = p * (dp - D);
                    for (int k = 0; k < d; ++k) {
                        dV[j * d + k] += p * dO[i * d + k];
                        dK[j * d + k] += ds * Q[i * d + k];
                        dq[k] += ds * K[j * d + k];
                    }
                }
            }
            std::copy(dq.begin(), dq.end(), dQ + i * d);
        }
    }
}
