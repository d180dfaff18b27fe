#pragma once
// out (B, T, OC) = inp (B, T, C) @ weight (OC, C)^T + bias (bias may be NULL).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C,
                    int OC) {
    for (int bt = 0; bt < B * T; bt++) {
        for (int o = 0; o < OC; o++) {
            float val = (bias != nullptr) ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) val += inp[bt * C + i] * weight[o * C + i];
            out[bt * OC + o] = val;
        }
    }
}
