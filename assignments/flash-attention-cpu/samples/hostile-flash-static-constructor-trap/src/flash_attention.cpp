// Hostile: a trap instruction (SIGILL) when the library is loaded (dlopen runs global constructors),
// before any kernel call; g++ emits the same ud2 for some undefined behaviour it can prove.
#include "flash_attention.h"

#include <cstdlib>

namespace {
struct TrapOnLoad {
    // Behind a condition the optimiser can't decide, so that the constructor is kept.
    TrapOnLoad() { if (std::getenv("PATH") != reinterpret_cast<char*>(1)) __builtin_trap(); }
};
TrapOnLoad trap_on_load;
}  // namespace

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {}
