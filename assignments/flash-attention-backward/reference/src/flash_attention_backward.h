// The backward pass of Algorithm 1 of the FlashAttention paper (Dao et al., 2022): tiled attention, one head.
#pragma once

// The same gradients as standard_attention_backward, computed in Br x Bc tiles without forming an N x N
// matrix: each tile's P is recomputed from Q, K and the forward's row statistics, m[i] = max_j S[i][j] and
// l[i] = sum_j exp(S[i][j] - m[i]) (N floats each), as P[i][j] = exp(S[i][j] - m[i]) / l[i]. Br and Bc need
// not divide N: the last row and column blocks are partial.
void flash_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                              const float* dO, const float* m, const float* l, float* dQ, float* dK,
                              float* dV, int N, int d, int Br, int Bc);
