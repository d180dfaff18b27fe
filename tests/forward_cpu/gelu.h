#pragma once
#include <cmath>
void gelu_forward(float* out, const float* inp, int N) {
    const float s = sqrtf(2.0f / (float)M_PI);
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
    }
}
