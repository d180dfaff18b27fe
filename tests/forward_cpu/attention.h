#pragma once
#include <cmath>
// The course's CPU attention: inp (B, T, 3C) packed Q, K, V; att (B, NH, T, T) the softmaxed scores,
// zero above the diagonal; out (B, T, C). qkvr is the GPU version's scratch, unused here.
void attention_forward(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH) {
    (void)qkvr;
    int C3 = C * 3;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* query = inp + b * T * C3 + t * C3 + h * hs;
                float* att_bth = att + b * NH * T * T + h * T * T + t * T;
                float maxval = -10000.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* key = inp + b * T * C3 + t2 * C3 + h * hs + C;
                    float val = 0.0f;
                    for (int i = 0; i < hs; i++) val += query[i] * key[i];
                    val *= scale;
                    if (val > maxval) maxval = val;
                    att_bth[t2] = val;
                }
                float expsum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(att_bth[t2] - maxval);
                    expsum += e;
                    att_bth[t2] = e;
                }
                float inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;
                for (int t2 = 0; t2 < T; t2++) att_bth[t2] = t2 <= t ? att_bth[t2] * inv : 0.0f;
                float* out_bth = out + b * T * C + t * C + h * hs;
                for (int i = 0; i < hs; i++) out_bth[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* value = inp + b * T * C3 + t2 * C3 + h * hs + C * 2;
                    for (int i = 0; i < hs; i++) out_bth[i] += att_bth[t2] * value[i];
                }
            }
        }
    }
}
