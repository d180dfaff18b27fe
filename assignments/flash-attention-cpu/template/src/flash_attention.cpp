// Algorithm 1: the FlashAttention forward pass. Outer loop over key/value blocks K_j, V_j of Bc
// rows, inner loop over query blocks Q_i of Br rows; the softmax is never formed over a whole row.
#include "flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    // TODO: line 2, set O = 0 (it arrives filled with NaN), and keep two arrays of N floats:
    //       the running row sum l = 0 and the running row max m = -INFINITY.
    // TODO: line 5, outer loop over key/value blocks: rows [j*Bc, min((j+1)*Bc, N)) of K and V.
    //       Bc need not divide N, so the last block may be smaller.
    // TODO: line 7, inner loop over query blocks: rows [i*Br, min((i+1)*Br, N)) of Q, O, l, m.
    // TODO: line 9, S_ij = Q_i K_j^T, a (rows x cols) tile in a scratch std::vector.
    // TODO: line 10, per tile row: m~ = max of the row, P~ = exp(S_ij - m~), l~ = sum of P~.
    // TODO: line 11, m_new = max(m_i, m~); l_new = exp(m_i - m_new) * l_i + exp(m~ - m_new) * l~.
    // TODO: line 12, O_i = (l_i * exp(m_i - m_new) * O_i + exp(m~ - m_new) * P~ V_j) / l_new:
    //       the old rows of O were normalised by l_i against max m_i, so undo and redo both.
    // TODO: line 13, write l_i = l_new and m_i = m_new back.
}
