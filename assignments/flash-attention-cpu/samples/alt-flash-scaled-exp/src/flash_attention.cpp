// Algorithm 1 in the paper's loop order, with two changes: exponentials in base 2
// (e^x = 2^(x log2 e), the form GPU kernels use), and O accumulated unnormalised in scratch,
// divided by l once at the end instead of after every key block.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    constexpr float kLog2e = 1.4426950408889634f;
    // m holds the running max of the scores already multiplied by log2 e.
    std::vector<float> m(N, -INFINITY);
    std::vector<float> l(N, 0.0f);
    std::vector<float> acc(N * d, 0.0f);
    std::vector<float> s2(Bc);

    for (int kv_start = 0; kv_start < N; kv_start += Bc) {
        const int cols = std::min(Bc, N - kv_start);
        for (int q_start = 0; q_start < N; q_start += Br) {
            const int rows = std::min(Br, N - q_start);
            for (int r = 0; r < rows; ++r) {
                const int row = q_start + r;
                float tile_max = -INFINITY;
                for (int c = 0; c < cols; ++c) {
                    float dot = 0.0f;
                    for (int k = 0; k < d; ++k) dot += Q[row * d + k] * K[(kv_start + c) * d + k];
                    s2[c] = dot * kLog2e;
                    tile_max = std::max(tile_max, s2[c]);
                }
                const float m_new = std::max(m[row], tile_max);
                const float rescale = std::exp2(m[row] - m_new);
                float* acc_row = &acc[row * d];
                l[row] *= rescale;
                for (int k = 0; k < d; ++k) acc_row[k] *= rescale;
                for (int c = 0; c < cols; ++c) {
                    const float p = std::exp2(s2[c] - m_new);
                    l[row] += p;
                    for (int k = 0; k < d; ++k) acc_row[k] += p * V[(kv_start + c) * d + k];
                }
                m[row] = m_new;
            }
        }
    }

    for (int row = 0; row < N; ++row) {
        for (int k = 0; k < d; ++k) O[row * d + k] = acc[row * d + k] / l[row];
    }
}
