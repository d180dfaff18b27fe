// Runs a tiled-matmul kernel file on the CPU (fibers/cuda_runtime.h): reads A (M x K) and B (K x N), float32,
// from the files named on the command line, calls matmul_naive or matmul_tiled (KG_TILED) on C poisoned with NaN
// (as the grader poisons outputs), writes C. Usage: emulator A.bin B.bin C.bin M N K [tile]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include KERNEL_TEXT

static std::vector<float> read_floats(const char* path, size_t count) {
    std::vector<float> values(count);
    FILE* file = fopen(path, "rb");
    if (!file || fread(values.data(), sizeof(float), count, file) != count) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(file);
    return values;
}

int main(int argc, char** argv) {
    if (argc < 7) { fprintf(stderr, "usage: %s A B C M N K [tile]\n", argv[0]); return 2; }
    int M = atoi(argv[4]), N = atoi(argv[5]), K = atoi(argv[6]);
    std::vector<float> A = read_floats(argv[1], (size_t)M * K), B = read_floats(argv[2], (size_t)K * N);
    std::vector<float> C((size_t)M * N, NAN);
#ifdef KG_TILED
    matmul_tiled(A.data(), B.data(), C.data(), M, N, K, atoi(argv[7]));
#else
    matmul_naive(A.data(), B.data(), C.data(), M, N, K);
#endif
    FILE* out = fopen(argv[3], "wb");
    if (!out || fwrite(C.data(), sizeof(float), C.size(), out) != C.size()) { fprintf(stderr, "cannot write %s\n", argv[3]); return 2; }
    fclose(out);
    return 0;
}
