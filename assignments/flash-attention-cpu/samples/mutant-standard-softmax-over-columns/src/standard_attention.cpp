// Algorithm 0: S = Q K^T, P = softmax(S) row-wise, O = P V, each step over the whole matrix.
#include "standard_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    // The full N x N matrix is materialised on purpose: Algorithm 0 writes S and P to memory,
    // and that traffic is what Algorithm 1 removes. P overwrites S in place.
    std::vector<float> P(static_cast<std::size_t>(N) * N);

    // Line 1: S = Q K^T.
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            P[static_cast<std::size_t>(i) * N + j] = s;
        }
    }

    // Line 2: P = softmax(S).
    // MUTANT: normalises each column of S (over the queries) instead of each row.
    for (int j = 0; j < N; ++j) {
        float col_max = -INFINITY;
        for (int i = 0; i < N; ++i) col_max = std::max(col_max, P[static_cast<std::size_t>(i) * N + j]);
        float col_sum = 0.0f;
        for (int i = 0; i < N; ++i) {
            float& p = P[static_cast<std::size_t>(i) * N + j];
            p = std::exp(p - col_max);
            col_sum += p;
        }
        for (int i = 0; i < N; ++i) P[static_cast<std::size_t>(i) * N + j] /= col_sum;
    }

    // Line 3: O = P V.
    for (int i = 0; i < N; ++i) {
        // Outputs arrive poisoned with NaN, so every element is assigned, never accumulated into.
        for (int k = 0; k < d; ++k) O[i * d + k] = 0.0f;
        for (int j = 0; j < N; ++j) {
            const float p = P[static_cast<std::size_t>(i) * N + j];
            for (int k = 0; k < d; ++k) O[i * d + k] += p * V[j * d + k];
        }
    }
}
