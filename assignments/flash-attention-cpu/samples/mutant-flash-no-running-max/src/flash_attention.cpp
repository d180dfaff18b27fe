// Algorithm 1 without the running max: each tile's scores go straight into exp(), and O and l are
// accumulated unnormalised, divided by l once at the end. Exact in real arithmetic (the max
// cancels in the softmax), and right whenever every score lies within float's exp() range.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    std::fill(O, O + N * d, 0.0f);
    std::vector<float> l(N, 0.0f);

    for (int kv_start = 0; kv_start < N; kv_start += Bc) {
        const int cols = std::min(Bc, N - kv_start);
        const float* K_j = K + kv_start * d;
        const float* V_j = V + kv_start * d;

        for (int q_start = 0; q_start < N; q_start += Br) {
            const int rows = std::min(Br, N - q_start);
            for (int r = 0; r < rows; ++r) {
                const int row = q_start + r;
                float* o_row = O + row * d;
                for (int c = 0; c < cols; ++c) {
                    float s = 0.0f;
                    for (int k = 0; k < d; ++k) s += Q[row * d + k] * K_j[c * d + k];
                    // MUTANT: no m: exp(s) overflows to inf past s = 88.7 (and inf / inf is NaN),
                    // and underflows to 0 below s = -103 (0 / 0).
                    const float p = std::exp(s);
                    l[row] += p;
                    for (int k = 0; k < d; ++k) o_row[k] += p * V_j[c * d + k];
                }
            }
        }
    }
    for (int row = 0; row < N; ++row) {
        for (int k = 0; k < d; ++k) O[row * d + k] /= l[row];
    }
}
