// Algorithm 4 of the FlashAttention paper (backward), line by line, on the CPU.
#include "flash_attention_backward.h"

#include <algorithm>
#include <cmath>

void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc) {
    // line 4: dQ = dK = dV = 0
    for (int x = 0; x < N * d; x++) dQ[x] = dK[x] = dV[x] = 0;

    float Pij[64][64], dSij[64][64];  // tiles: Br, Bc <= 64 in every case
    for (int j0 = 0; j0 < N; j0 += Bc) {          // line 6
        int bc = std::min(Bc, N - j0);
        for (int i0 = 0; i0 < N; i0 += Br) {      // line 10
            int br = std::min(Br, N - i0);
            for (int r = 0; r < br; r++) {
                int i = i0 + r;
                // line 13-14: P_ij = diag(l_i)^-1 exp(S_ij - m_i)
                for (int c = 0; c < bc; c++) {
                    float s = 0;
                    for (int k = 0; k < d; k++) s += Q[i * d + k] * K[(j0 + c) * d + k];
                    Pij[r][c] = expf(s - m[i]) / l[i];
                }
                // line 19: D_i = rowsum(dO_i o O_i)
                float Di = 0;
                for (int k = 0; k < d; k++) Di += dO[i * d + k] * O[i * d + k];
                // line 18, 20: dP_ij = dO_i V_j^T, dS_ij = P_ij o (dP_ij - D_i)
                for (int c = 0; c < bc; c++) {
                    float dp = 0;
                    for (int k = 0; k < d; k++) dp += dO[i * d + k] * V[(j0 + c) * d + k];
                    dSij[r][c] = Pij[r][c] * (dp - Di);
                }
            }
            // line 16, 21, 22: dV_j += P_ij^T dO_i, dQ_i += dS_ij K_j, dK_j += dS_ij^T Q_i
            for (int r = 0; r < br; r++)
                for (int c = 0; c < bc; c++)
                    for (int k = 0; k < d; k++) {
                        dV[(j0 + c) * d + k] += Pij[r][c] * dO[(i0 + r) * d + k];
                        dQ[(i0 + r) * d + k] += dSij[r][c] * K[(j0 + c) * d + k];
                        dK[(j0 + c) * d + k] += dSij[r][c] * Q[(i0 + r) * d + k];
                    }
        }
    }
}
