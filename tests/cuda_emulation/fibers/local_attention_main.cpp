// Runs a local-attention kernel file (gpt2-m3's req_5) on the CPU (fibers/cuda_runtime.h): reads the packed
// (B, T, 3, NH, HS) float32 input from a file into an allocation as large as the grader's, calls the host function
// (KG_FUNCTION) with qkvr and out poisoned with NaN (as the grader poisons outputs), writes out.
// Usage: emulator inp.bin out.bin B T NH HS
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
using std::max;
using std::min;
#include KERNEL_TEXT

int main(int argc, char** argv) {
    if (argc < 7) { fprintf(stderr, "usage: %s inp out B T NH HS\n", argv[0]); return 2; }
    int B = atoi(argv[3]), T = atoi(argv[4]), NH = atoi(argv[5]), HS = atoi(argv[6]);
    size_t packed = (size_t)B * T * 3 * NH * HS, n = (size_t)B * NH * T * HS;
    std::vector<float> inp((size_t)B * T * std::max((size_t)3 * NH * HS, (size_t)NH * T), NAN);
    FILE* file = fopen(argv[1], "rb");
    if (!file || fread(inp.data(), sizeof(float), packed, file) != packed) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
    fclose(file);
    std::vector<float> qkvr(3 * n, NAN), out(n, NAN);
    KG_FUNCTION(out.data(), qkvr.data(), inp.data(), B, T, NH, HS);
    FILE* written = fopen(argv[2], "wb");
    if (!written || fwrite(out.data(), sizeof(float), n, written) != n) { fprintf(stderr, "cannot write %s\n", argv[2]); return 2; }
    fclose(written);
    return 0;
}
