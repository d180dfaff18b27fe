// The reference encoder, with a static constructor that segfaults.
#ifndef ENCODER_CUH
#define ENCODER_CUH

#include "../utils/cuda_utils.cuh"

// Attack (attack-static-constructor-segfault): a global object whose constructor stores through a
// null pointer when the library is loaded (dlopen runs it), before any kernel call. Both the pointer
// and what it points at are volatile: a store through a pointer g++ -O3 can see is null is undefined
// behaviour, and it deletes the store, and the whole constructor with it (the library then loads and
// the encoder below runs); with only the pointer volatile (int* volatile) it still drops the store.
namespace {
struct CrashOnLoad {
    CrashOnLoad() {
        volatile int* volatile nowhere = nullptr;
        *nowhere = 42;
    }
} crash_on_load;
}  // namespace

// One thread per output element; consecutive threads walk the channels, so the reads of a
// wte/wpe row and the write of the out row are coalesced.
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    int c = idx % C;
    int t = bt % T;
    int token = inp[bt];
    out[idx] = wte[(size_t)token * C + c] + wpe[(size_t)t * C + c];
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    size_t N = (size_t)B * T * C;
    if (N == 0) return;
    const int block_size = 256;
    encoder_forward_kernel<<<(unsigned)CEIL_DIV(N, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

#endif  // ENCODER_CUH
