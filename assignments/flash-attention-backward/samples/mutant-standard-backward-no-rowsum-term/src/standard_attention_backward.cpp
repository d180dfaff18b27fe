// The backward pass of Algorithm 0: recompute P, then dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with
// D = rowsum(dO * O), dQ = dS K and dK = dS^T Q, each step over the whole N x N matrix.
#include "standard_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

void standard_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                                 const float* dO, float* dQ, float* dK, float* dV, int N, int d) {
    // Two N x N matrices, on purpose: Algorithm 0's backward reads and writes P, dP and dS in memory, and
    // that traffic is what Algorithm 1's backward removes. dP becomes dS in place.
    const std::size_t n = static_cast<std::size_t>(N);
    std::vector<float> P(n * n);
    std::vector<float> dS(n * n);

    // P = softmax(Q K^T), row by row, against the row max (scores may lie far past exp()'s range).
    for (int i = 0; i < N; ++i) {
        float* row = &P[i * n];
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            row[j] = s;
        }
        const float row_max = *std::max_element(row, row + N);
        float row_sum = 0.0f;
        for (int j = 0; j < N; ++j) {
            row[j] = std::exp(row[j] - row_max);
            row_sum += row[j];
        }
        for (int j = 0; j < N; ++j) row[j] /= row_sum;
    }

    // dV = P^T dO: dV[j] = sum over i of P[i][j] dO[i]. Outputs arrive poisoned with NaN: zero them first.
    std::fill(dV, dV + N * d, 0.0f);
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            const float p = P[i * n + j];
            for (int k = 0; k < d; ++k) dV[j * d + k] += p * dO[i * d + k];
        }
    }

    // dP = dO V^T, then dS = P * (dP - D_i), D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij: the softmax
    // Jacobian diag(P_i) - P_i P_i^T applied to dP_i.
    for (int i = 0; i < N; ++i) {
        float D = 0.0f;
        for (int k = 0; k < d; ++k) D += dO[i * d + k] * O[i * d + k];
        for (int j = 0; j < N; ++j) {
            float dp = 0.0f;
            for (int k = 0; k < d; ++k) dp += dO[i * d + k] * V[j * d + k];
            // MUTANT: the softmax Jacobian's rank-one part is missing: dS = P * dP, not P * (dP - D).
            (void)D;
            dS[i * n + j] = P[i * n + j] * dp;
        }
    }

    // dQ = dS K and dK = dS^T Q.
    std::fill(dQ, dQ + N * d, 0.0f);
    std::fill(dK, dK + N * d, 0.0f);
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            const float ds = dS[i * n + j];
            for (int k = 0; k < d; ++k) {
                dQ[i * d + k] += ds * K[j * d + k];
                dK[j * d + k] += ds * Q[i * d + k];
            }
        }
    }
}
