// My helpers for both algorithms: the score of one query row against one key row, and the row max.
#ifndef HELPER_H
#define HELPER_H

#include <cmath>

inline float dot_row(const float* q, const float* k, int d) {
    float s = 0.0f;
    for (int t = 0; t < d; t++) s += q[t] * k[t];
    return s;
}

inline float max_of(const float* x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

#endif
