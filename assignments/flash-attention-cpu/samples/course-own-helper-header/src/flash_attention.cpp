#include "flash_attention.h"
#include "helper.h"

#include <algorithm>
#include <vector>

// Algorithm 1
void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d, int Br, int Bc) {
    for (int i = 0; i < N * d; i++) O[i] = 0.0f;
    std::vector<float> l(N, 0.0f), m(N, -INFINITY), S(Br * Bc);

    for (int j0 = 0; j0 < N; j0 += Bc) {
        int bc = std::min(Bc, N - j0);
        for (int i0 = 0; i0 < N; i0 += Br) {
            int br = std::min(Br, N - i0);
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++) S[r * Bc + c] = dot_row(Q + (i0 + r) * d, K + (j0 + c) * d, d);

            for (int r = 0; r < br; r++) {
                int row = i0 + r;
                float mt = max_of(&S[r * Bc], bc);
                float lt = 0.0f;
                for (int c = 0; c < bc; c++) {
                    S[r * Bc + c] = std::exp(S[r * Bc + c] - mt);
                    lt += S[r * Bc + c];
                }
                float mn = std::max(m[row], mt);
                float a = std::exp(m[row] - mn), b = std::exp(mt - mn);
                float ln = a * l[row] + b * lt;
                for (int k = 0; k < d; k++) {
                    float pv = 0.0f;
                    for (int c = 0; c < bc; c++) pv += S[r * Bc + c] * V[(j0 + c) * d + k];
                    O[row * d + k] = (a * l[row] * O[row * d + k] + b * pv) / ln;
                }
                l[row] = ln;
                m[row] = mn;
            }
        }
    }
}
