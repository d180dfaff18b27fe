#pragma once
#include <cmath>
// Two-pass mean and (biased) variance per row, as the course's CPU reference.
void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias, int B, int T,
                       int C) {
    const float eps = 1e-5f;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* x = inp + b * T * C + t * C;
            float m = 0.0f;
            for (int i = 0; i < C; i++) m += x[i];
            m = m / C;
            float v = 0.0f;
            for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
            v = v / C;
            float s = 1.0f / sqrtf(v + eps);
            float* out_bt = out + b * T * C + t * C;
            for (int i = 0; i < C; i++) out_bt[i] = s * (x[i] - m) * weight[i] + bias[i];
            mean[b * T + t] = m;
            rstd[b * T + t] = s;
        }
    }
}
