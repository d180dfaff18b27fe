// Hostile: aborts when the library is loaded (dlopen runs global constructors), before any
// kernel call, so the harness dies in ctypes.CDLL rather than in flash_attention.
#include "flash_attention.h"

#include <cstdlib>

namespace {
struct AbortOnLoad {
    AbortOnLoad() { std::abort(); }
};
AbortOnLoad abort_on_load;
}  // namespace

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {}
