// Attack (attack-host-memory-hog): host code that mallocs and touches 8 GiB (bounded) in 64 MiB blocks.
#include "standard_attention.h"

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace attack {
// The correct answer (Algorithm 0), so that an attack nothing stops passes its cases, and the test sees it.
inline void attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    std::vector<float> P(static_cast<std::size_t>(N) * N);
    for (int i = 0; i < N; ++i) {
        float row_max = -INFINITY;
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            P[static_cast<std::size_t>(i) * N + j] = s;
            row_max = s > row_max ? s : row_max;
        }
        float sum = 0.0f;
        for (int j = 0; j < N; ++j) sum += (P[static_cast<std::size_t>(i) * N + j] = std::exp(P[static_cast<std::size_t>(i) * N + j] - row_max));
        for (int k = 0; k < d; ++k) O[i * d + k] = 0.0f;
        for (int j = 0; j < N; ++j)
            for (int k = 0; k < d; ++k) O[i * d + k] += P[static_cast<std::size_t>(i) * N + j] / sum * V[j * d + k];
    }
}
}  // namespace attack

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    const std::size_t block = std::size_t(64) << 20, most = std::size_t(8) << 30;  // bounded: never more than 8 GiB
    std::vector<char*> held;
    for (std::size_t total = 0; total < most; total += block) {
        char* memory = static_cast<char*>(std::malloc(block));
        if (memory == nullptr) break;  // an allocation limit alone lets the run go on, with the right answer
        std::memset(memory, 1, block);
        held.push_back(memory);
    }
    std::printf("touched %zu MiB\n", held.size() * 64);
    for (char* memory : held) std::free(memory);
    attack::attention(Q, K, V, O, N, d);
}
