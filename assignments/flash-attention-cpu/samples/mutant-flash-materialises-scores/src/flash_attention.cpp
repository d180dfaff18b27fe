// A mutant: every score S = Q K^T computed first into one N x N matrix, then Algorithm 1's tiles read from it.
// The answer is right (the same online softmax), but it holds O(N^2) memory, which Algorithm 1 exists to avoid.
// Algorithm 1: the FlashAttention forward pass. Outer loop over key/value blocks K_j, V_j of Bc
// rows, inner loop over query blocks Q_i of Br rows; the softmax is never formed over a whole row.
// Instead each row keeps a running max m and running sum l, and O is rescaled as they change.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    // Line 2: O = 0, l = 0, m = -inf. O must be zeroed: it arrives poisoned with NaN, and
    // 0 * NaN in the first rescale below would still be NaN.
    std::fill(O, O + N * d, 0.0f);
    std::vector<float> l(N, 0.0f);
    std::vector<float> m(N, -INFINITY);

    // On-chip scratch of one tile: S_ij, then P~_ij in place (Br x Bc), and its row statistics.
    std::vector<float> P(Br * Bc);
    std::vector<float> m_tile(Br);
    std::vector<float> l_tile(Br);
    std::vector<float> pv(d);

    std::vector<float> S(static_cast<size_t>(N) * N);  // the N x N scores, all at once
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            S[static_cast<size_t>(i) * N + j] = s;
        }
    }

    // Line 5: for each key/value block j. The last block holds N mod Bc rows when Bc does not
    // divide N.
    for (int kv_start = 0; kv_start < N; kv_start += Bc) {
        const int cols = std::min(Bc, N - kv_start);
        const float* K_j = K + kv_start * d;
        const float* V_j = V + kv_start * d;

        // Line 7: for each query block i.
        for (int q_start = 0; q_start < N; q_start += Br) {
            const int rows = std::min(Br, N - q_start);
    
            // Line 9, read from the whole score matrix.
            for (int r = 0; r < rows; ++r) {
                for (int c = 0; c < cols; ++c) P[r * Bc + c] = S[static_cast<size_t>(q_start + r) * N + kv_start + c];
            }

            // Line 10: m~_ij = rowmax(S_ij), P~_ij = exp(S_ij - m~_ij), l~_ij = rowsum(P~_ij).
            for (int r = 0; r < rows; ++r) {
                float* p_row = &P[r * Bc];
                m_tile[r] = *std::max_element(p_row, p_row + cols);
                l_tile[r] = 0.0f;
                for (int c = 0; c < cols; ++c) {
                    p_row[c] = std::exp(p_row[c] - m_tile[r]);
                    l_tile[r] += p_row[c];
                }
            }

            for (int r = 0; r < rows; ++r) {
                const int row = q_start + r;
                const float* p_row = &P[r * Bc];

                // Line 11: merge this tile's statistics into the running ones.
                const float m_new = std::max(m[row], m_tile[r]);
                // Both factors bring a sum taken against an older max onto the new one; on the
                // first block m = -inf, so the old part vanishes (l = 0 and O = 0 there anyway).
                const float old_scale = std::exp(m[row] - m_new);
                const float tile_scale = std::exp(m_tile[r] - m_new);
                const float l_new = old_scale * l[row] + tile_scale * l_tile[r];

                // Line 12: O_i = diag(l_new)^-1 (diag(l_i) e^(m_i - m_new) O_i
                //                                + e^(m~_ij - m_new) P~_ij V_j).
                std::fill(pv.begin(), pv.end(), 0.0f);
                for (int c = 0; c < cols; ++c) {
                    for (int k = 0; k < d; ++k) pv[k] += p_row[c] * V_j[c * d + k];
                }
                float* o_row = O + row * d;
                for (int k = 0; k < d; ++k) {
                    o_row[k] = (l[row] * old_scale * o_row[k] + tile_scale * pv[k]) / l_new;
                }

                // Line 13: l_i = l_new, m_i = m_new.
                l[row] = l_new;
                m[row] = m_new;
            }
        }
    }
}
