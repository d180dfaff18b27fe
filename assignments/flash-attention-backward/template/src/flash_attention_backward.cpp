// The backward pass of Algorithm 1 (Algorithm 4 of the paper's appendix, without dropout): outer loop over
// key/value blocks K_j, V_j of Bc rows, inner loop over query blocks Q_i of Br rows; P is recomputed tile by
// tile from the forward's row statistics m and l, never stored whole.
#include "flash_attention_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc) {
    // TODO: dQ = 0 (it arrives filled with NaN, like dK and dV).
    // TODO: outer loop over key/value blocks: rows [j*Bc, min((j+1)*Bc, N)) of K and V (Bc need not divide N).
    //       Keep dK_j and dV_j (Bc x d) in scratch, zeroed for each block.
    // TODO: inner loop over query blocks: rows [i*Br, min((i+1)*Br, N)) of Q, O, dO, dQ, m and l.
    // TODO: S_ij = Q_i K_j^T; P_ij = exp(S_ij - m_i) / l_i (the forward's softmax, exactly).
    // TODO: dV_j += P_ij^T dO_i; dP_ij = dO_i V_j^T; D_i = rowsum(dO_i * O_i); dS_ij = P_ij * (dP_ij - D_i).
    // TODO: dQ_i += dS_ij K_j (in dQ itself); dK_j += dS_ij^T Q_i.
    // TODO: after the inner loop, write dK_j and dV_j to their rows of dK and dV.
}
