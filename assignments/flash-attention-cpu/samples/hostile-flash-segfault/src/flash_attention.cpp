// Hostile: crashes the harness with SIGSEGV on the first call.
#include "flash_attention.h"

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d,
                     int Br, int Bc) {
    // Both volatiles are needed: the pointer's hides the null from the optimiser (else a trap
    // instruction, SIGILL), the pointee's keeps g++ -O2 from deleting the store altogether.
    volatile float* volatile target = nullptr;
    *target = Q[0] + K[0] + V[0] + O[0] + float(N + d + Br + Bc);
}
