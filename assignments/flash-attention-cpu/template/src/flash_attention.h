// Algorithm 1 of the FlashAttention paper (Dao et al., 2022): tiled attention forward pass, one head.
#pragma once

// O = softmax(Q K^T) V as in standard_attention, computed in Br x Bc tiles without forming the
// N x N score matrix. Br and Bc need not divide N: the last row and column blocks are partial.
void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc);
