// Backward pass of standard attention, ported from my CPU reference: every matrix as a vector of rows.
#include "standard_attention_backward.h"

#include <cmath>
#include <vector>

using Matrix = std::vector<std::vector<float>>;

void standard_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                                 const float* dO, float* dQ, float* dK, float* dV, int N, int d) {
    (void)O;  // D is taken as sum_j P_ij dP_ij, which equals rowsum(dO * O)
    Matrix S(N, std::vector<float>(N)), P(N, std::vector<float>(N)), dP(N, std::vector<float>(N)),
        dS(N, std::vector<float>(N));

    // forward again: S = Q K^T, P = softmax(S)
    for (int i = 0; i < N; i++) {
        float mx = -1e30f;
        for (int j = 0; j < N; j++) {
            S[i][j] = 0;
            for (int k = 0; k < d; k++) S[i][j] += Q[i * d + k] * K[j * d + k];
            if (S[i][j] > mx) mx = S[i][j];
        }
        float sum = 0;
        for (int j = 0; j < N; j++) {
            P[i][j] = expf(S[i][j] - mx);
            sum += P[i][j];
        }
        for (int j = 0; j < N; j++) P[i][j] /= sum;
    }

    // dV = P^T dO
    for (int j = 0; j < N; j++)
        for (int k = 0; k < d; k++) {
            float acc = 0;
            for (int i = 0; i < N; i++) acc += P[i][j] * dO[i * d + k];
            dV[j * d + k] = acc;
        }

    // dP = dO V^T
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            dP[i][j] = 0;
            for (int k = 0; k < d; k++) dP[i][j] += dO[i * d + k] * V[j * d + k];
        }

    // softmax backward: dS_ij = P_ij (dP_ij - sum_t P_it dP_it)
    for (int i = 0; i < N; i++) {
        float D = 0;
        for (int t = 0; t < N; t++) D += P[i][t] * dP[i][t];
        for (int j = 0; j < N; j++) dS[i][j] = P[i][j] * (dP[i][j] - D);
    }

    // dQ = dS K, dK = dS^T Q
    for (int i = 0; i < N; i++)
        for (int k = 0; k < d; k++) {
            float acc = 0;
            for (int j = 0; j < N; j++) acc += dS[i][j] * K[j * d + k];
            dQ[i * d + k] = acc;
        }
    for (int j = 0; j < N; j++)
        for (int k = 0; k < d; k++) {
            float acc = 0;
            for (int i = 0; i < N; i++) acc += dS[i][j] * Q[i * d + k];
            dK[j * d + k] = acc;
        }
}
