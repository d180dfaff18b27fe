// Attack (attack-flood-output-files): floods the one writable folder with 50000 names (hard links).
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
    // Names of one empty file: what the limit counts is entries, and links are fast on any disk (a new
    // inode on ext4 is slow right after many were deleted, as by the flood before this one).
    int fd = open("flood", O_WRONLY | O_CREAT, 0600);
    if (fd >= 0) close(fd);
    for (int i = 0; i < 50000; ++i) {
        std::string name = "flood-" + std::to_string(i);
        if (link("flood", name.c_str()) != 0) break;
    }
    usleep(2000000);  // keeps running a while (not past the 3 s limit: unstopped, it would pass)
    attack::attention(Q, K, V, O, N, d);
}
