#pragma once
// Writes 16 elements past the end of out: into whatever tensor the program placed after it.
void residual_forward(float* out, float* inp1, float* inp2, int N) {
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
    for (int i = N; i < N + 16; i++) out[i] = 1.0f;
}
