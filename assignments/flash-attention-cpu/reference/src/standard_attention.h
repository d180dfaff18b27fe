// Algorithm 0 of the FlashAttention paper (Dao et al., 2022): standard attention, one head.
#pragma once

// O = softmax(Q K^T) V, softmax taken over each row; no 1/sqrt(d) scaling and no mask.
// Q, K, V and O are row-major N x d float32 matrices; every element of O is overwritten.
void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d);
