// Algorithm 0: S = Q K^T, P = softmax(S) row-wise, O = P V, each step over the whole matrix.
#include "standard_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    // The full N x N matrix is materialised on purpose: Algorithm 0 writes S and P to memory,
    // and that traffic is what Algorithm 1 removes. P overwrites S in place.
    std::vector<float> P(static_cast<std::size_t>(N) * N;  // HOSTILE: missing ')'

    // Line 1: S = Q K^T.
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            P[static_cast<std::size_t>(i) * N + j] = s;
        }
    }

    // Line 2: P = softmax(S), row by row.
    for (int i = 0; i < N; ++i) {
        float* row = &P[static_cast<std::size_t>(i) * N];
        // Shifting by the row max keeps exp() finite and leaves the softmax unchanged.
        const float row_max = *std::max_element(row, row + N);
        float row_sum = 0.0f;
        for (int j = 0; j < N; ++j) {
            row[j] = std::exp(row[j] - row_max);
            row_sum += row[j];
        }
        for (int j = 0; j < N; ++j) row[j] /= row_sum;
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
