// Algorithm 0 row by row, every sum in double; only the final O is rounded to float.
#include "standard_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<double> p(N);
    std::vector<double> out(d);
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            double s = 0.0;
            for (int k = 0; k < d; ++k) s += double(Q[i * d + k]) * double(K[j * d + k]);
            p[j] = s;
        }
        const double row_max = *std::max_element(p.begin(), p.end());
        double row_sum = 0.0;
        for (int j = 0; j < N; ++j) {
            p[j] = std::exp(p[j] - row_max);
            row_sum += p[j];
        }
        std::fill(out.begin(), out.end(), 0.0);
        for (int j = 0; j < N; ++j) {
            for (int k = 0; k < d; ++k) out[k] += p[j] * double(V[j * d + k]);
        }
        for (int k = 0; k < d; ++k) O[i * d + k] = float(out[k] / row_sum);
    }
}
