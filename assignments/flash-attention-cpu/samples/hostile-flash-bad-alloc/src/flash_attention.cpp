// Hostile: asks operator new for a petabyte on the first call; the std::bad_alloc it throws is never caught.
#include "flash_attention.h"

#include <cstddef>
#include <new>

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    std::size_t petabyte = std::size_t(1) << 50;
    float* scores = static_cast<float*>(::operator new(petabyte));
    for (int i = 0; i < N * d; ++i) O[i] = Q[i] + K[i] + V[i] + scores[0] + float(Br + Bc);
    ::operator delete(scores);
}
