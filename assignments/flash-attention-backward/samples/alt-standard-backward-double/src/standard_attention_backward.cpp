// The backward pass of Algorithm 0 row by row, every sum in double; only dQ, dK and dV are rounded to float.
#include "standard_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

void standard_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                                 const float* dO, float* dQ, float* dK, float* dV, int N, int d) {
    std::vector<double> dq(static_cast<std::size_t>(N) * d, 0.0), dk(dq.size(), 0.0), dv(dq.size(), 0.0);
    std::vector<double> p(N), ds(N);
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            double s = 0.0;
            for (int k = 0; k < d; ++k) s += double(Q[i * d + k]) * double(K[j * d + k]);
            p[j] = s;
        }
        const double row_max = *std::max_element(p.begin(), p.end());
        double row_sum = 0.0;
        for (int j = 0; j < N; ++j) row_sum += (p[j] = std::exp(p[j] - row_max));
        double D = 0.0;
        for (int k = 0; k < d; ++k) D += double(dO[i * d + k]) * double(O[i * d + k]);
        for (int j = 0; j < N; ++j) {
            p[j] /= row_sum;
            double dp = 0.0;
            for (int k = 0; k < d; ++k) dp += double(dO[i * d + k]) * double(V[j * d + k]);
            ds[j] = p[j] * (dp - D);
            for (int k = 0; k < d; ++k) {
                dv[j * d + k] += p[j] * dO[i * d + k];
                dq[i * d + k] += ds[j] * K[j * d + k];
                dk[j * d + k] += ds[j] * Q[i * d + k];
            }
        }
    }
    for (std::size_t x = 0; x < dq.size(); ++x) {
        dQ[x] = float(dq[x]);
        dK[x] = float(dk[x]);
        dV[x] = float(dv[x]);
    }
}
