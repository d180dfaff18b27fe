// The backward pass of Algorithm 1 (Algorithm 4 of the paper's appendix, without dropout): outer loop over
// key/value blocks K_j, V_j of Bc rows, inner loop over query blocks Q_i of Br rows. P_ij is recomputed from
// the forward's statistics m and l rather than stored; dK_j and dV_j accumulate in on-chip tiles, dQ_i in
// memory.
#include "flash_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc) {
    // dQ accumulates over key blocks; it arrives poisoned with NaN.
    std::fill(dQ, dQ + N * d, 0.0f);
    std::fill(dV, dV + N * d, 0.0f);

    // D_i = rowsum(dO_i * O_i), once per row (the paper computes it per tile; it does not depend on j).
    std::vector<float> D(N);
    for (int i = 0; i < N; ++i) {
        float sum = 0.0f;
        for (int k = 0; k < d; ++k) sum += dO[i * d + k] * O[i * d + k];
        D[i] = sum;
    }

    // On-chip scratch of one tile: P_ij and dS_ij (Br x Bc), and the key block's dK_j and dV_j (Bc x d).
    std::vector<float> P(Br * Bc);
    std::vector<float> dS(Br * Bc);
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
                const float* q = Q + row * d;
                const float* dout = dO + row * d;
                for (int c = 0; c < cols; ++c) {
                    // S_ij = Q_i K_j^T; P_ij = exp(S_ij - m_i) / l_i, the forward's softmax exactly.
                    float s = 0.0f;
                    for (int k = 0; k < d; ++k) s += q[k] * K_j[c * d + k];
                    const float p = std::exp(s - m[row]) / l[row];
                    // dP_ij = dO_i V_j^T; dS_ij = P_ij * (dP_ij - D_i).
                    float dp = 0.0f;
                    for (int k = 0; k < d; ++k) dp += dout[k] * V_j[c * d + k];
                    P[r * Bc + c] = p;
                    dS[r * Bc + c] = p * (dp - D[row]);
                }
            }

            for (int r = 0; r < rows; ++r) {
                const int row = q_start + r;
                for (int c = 0; c < cols; ++c) {
                    const float p = P[r * Bc + c];
                    const float ds = dS[r * Bc + c];
                    for (int k = 0; k < d; ++k) {
                        // MUTANT: dV = P dO, summed over the keys instead of the queries.
                        dV[row * d + k] += p * dO[kv_start * d + c * d + k];
                        dK_j[c * d + k] += ds * Q[row * d + k];   // dK_j += dS_ij^T Q_i
                        dQ[row * d + k] += ds * K_j[c * d + k];   // dQ_i += dS_ij K_j
                    }
                }
            }
        }

        // Write dK_j and dV_j: every key row belongs to exactly one block, so each is written once.
        std::copy(dK_j.begin(), dK_j.begin() + cols * d, dK + kv_start * d);
    }
}
