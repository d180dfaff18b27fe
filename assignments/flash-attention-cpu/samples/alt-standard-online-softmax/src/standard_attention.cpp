// Algorithm 0 computed one row at a time with an online softmax: a single pass over the keys
// keeps a running max, a running sum and an unnormalised output row, rescaled when the max grows.
#include "standard_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<float> acc(d);
    for (int i = 0; i < N; ++i) {
        float running_max = -INFINITY;
        float running_sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            const float new_max = std::fmax(running_max, s);
            // exp(-inf) = 0 on the first key, so the empty sum and row need no special case.
            const float rescale = std::exp(running_max - new_max);
            const float p = std::exp(s - new_max);
            running_sum = running_sum * rescale + p;
            for (int k = 0; k < d; ++k) acc[k] = acc[k] * rescale + p * V[j * d + k];
            running_max = new_max;
        }
        for (int k = 0; k < d; ++k) O[i * d + k] = acc[k] / running_sum;
    }
}
