#pragma once
// The course's CPU reference, ported as written: out[b, t, :] = wte[inp[b, t], :] + wpe[t, :].
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* out_bt = out + b * T * C + t * C;
            const float* wte_ix = wte + inp[b * T + t] * C;
            const float* wpe_t = wpe + t * C;
            for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
        }
    }
}
