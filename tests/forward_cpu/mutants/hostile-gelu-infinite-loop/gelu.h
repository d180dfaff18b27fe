#pragma once
// Never returns.
void gelu_forward(float* out, const float* inp, int N) {
    volatile bool forever = true;
    while (forever) {
    }
    out[0] = inp[0] + N;
}
