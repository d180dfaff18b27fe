#pragma once
// Dereferences NULL on every call: its own cases crash, and so does every pass of the forward check.
void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    volatile float* nowhere = nullptr;
    *nowhere = out[0] + qkvr[0] + att[0] + inp[0] + B + T + C + NH;
}
