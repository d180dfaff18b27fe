// Hostile: never returns; only the harness's time limit ends it.
#include "flash_attention.h"

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    // A side-effect-free infinite loop is undefined behaviour the optimiser may delete; a
    // volatile access is a side effect, so this one must really spin.
    volatile unsigned long spins = 0;
    for (;;) ++spins;
}
