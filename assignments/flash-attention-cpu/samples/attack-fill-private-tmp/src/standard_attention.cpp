// Attack (attack-fill-private-tmp): fills the private /tmp (a bounded tmpfs) and keeps the file.
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
    int fd = open("/tmp/kernel-grader-fill-attack", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        std::vector<char> chunk(std::size_t(1) << 20, 'x');
        for (int written = 0; written < 512; ++written)
            if (write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) break;  // full
        close(fd);
    }
    usleep(2000000);  // holds the full /tmp a while (not past the 3 s limit: unstopped, it would pass)
    attack::attention(Q, K, V, O, N, d);
}
