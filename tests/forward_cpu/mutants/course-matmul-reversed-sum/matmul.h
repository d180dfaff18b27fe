#pragma once
// Sums the dot product from the last channel down, in float: another rounding, still within tolerance.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C,
                    int OC) {
    for (int bt = 0; bt < B * T; bt++) {
        for (int o = 0; o < OC; o++) {
            float val = 0.0f;
            for (int i = C - 1; i >= 0; i--) val += inp[bt * C + i] * weight[o * C + i];
            out[bt * OC + o] = val + ((bias != nullptr) ? bias[o] : 0.0f);
        }
    }
}
