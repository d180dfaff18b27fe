#include "standard_attention.h"
#include "helper.h"

#include <vector>

// Algorithm 0
void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<float> S(N * N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) S[i * N + j] = dot_row(Q + i * d, K + j * d, d);

    for (int i = 0; i < N; i++) {
        float m = max_of(&S[i * N], N);
        float sum = 0.0f;
        for (int j = 0; j < N; j++) {
            S[i * N + j] = std::exp(S[i * N + j] - m);
            sum += S[i * N + j];
        }
        for (int j = 0; j < N; j++) S[i * N + j] /= sum;
    }

    for (int i = 0; i < N; i++)
        for (int k = 0; k < d; k++) {
            float acc = 0.0f;
            for (int j = 0; j < N; j++) acc += S[i * N + j] * V[j * d + k];
            O[i * d + k] = acc;
        }
}
