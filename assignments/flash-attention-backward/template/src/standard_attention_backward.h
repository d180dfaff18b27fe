// The backward pass of Algorithm 0 of the FlashAttention paper (Dao et al., 2022): standard attention, one head.
#pragma once

// Gradients of O = softmax(Q K^T) V (softmax over each row; no 1/sqrt(d) scaling, no mask) given the upstream
// gradient dO = dL/dO: dQ = dL/dQ, dK = dL/dK, dV = dL/dV. O is the forward's output. Q, K, V, O, dO, dQ, dK
// and dV are row-major N x d float32 matrices; every element of dQ, dK and dV is overwritten.
void standard_attention_backward(const float* Q, const float* K, const float* V, const float* O,
                                 const float* dO, float* dQ, float* dK, float* dV, int N, int d);
