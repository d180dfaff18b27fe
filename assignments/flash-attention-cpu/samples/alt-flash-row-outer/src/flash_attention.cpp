// Algorithm 1 with its loops swapped, as FlashAttention-2 does: outer loop over query blocks,
// inner loop over key/value blocks. A query block's m, l and unnormalised O stay local to it
// and O is divided by l once, when the block is done.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    std::vector<float> acc(Br * d);
    std::vector<float> m(Br);
    std::vector<float> l(Br);
    std::vector<float> s(Bc);

    for (int q_start = 0; q_start < N; q_start += Br) {
        const int rows = std::min(Br, N - q_start);
        std::fill(acc.begin(), acc.end(), 0.0f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);

        for (int kv_start = 0; kv_start < N; kv_start += Bc) {
            const int cols = std::min(Bc, N - kv_start);
            for (int r = 0; r < rows; ++r) {
                const float* q = Q + (q_start + r) * d;
                float tile_max = -INFINITY;
                for (int c = 0; c < cols; ++c) {
                    const float* k_row = K + (kv_start + c) * d;
                    float dot = 0.0f;
                    for (int k = 0; k < d; ++k) dot += q[k] * k_row[k];
                    s[c] = dot;
                    tile_max = std::max(tile_max, dot);
                }
                const float m_new = std::max(m[r], tile_max);
                // Only the sum and the unnormalised row need rescaling: no division until the end.
                const float rescale = std::exp(m[r] - m_new);
                float* acc_row = &acc[r * d];
                l[r] *= rescale;
                for (int k = 0; k < d; ++k) acc_row[k] *= rescale;
                for (int c = 0; c < cols; ++c) {
                    const float p = std::exp(s[c] - m_new);
                    l[r] += p;
                    const float* v_row = V + (kv_start + c) * d;
                    for (int k = 0; k < d; ++k) acc_row[k] += p * v_row[k];
                }
                m[r] = m_new;
            }
        }

        for (int r = 0; r < rows; ++r) {
            for (int k = 0; k < d; ++k) O[(q_start + r) * d + k] = acc[r * d + k] / l[r];
        }
    }
}
