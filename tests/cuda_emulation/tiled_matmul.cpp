// gpt2-m2's reference req_0 tiled_matmul_kernel, run on the CPU (tests/test_tiled_matmul_emulated.py): one
// std::thread per CUDA thread, the blocks one at a time, __shared__ as function statics (shared by the
// block's threads, and only by them), __syncthreads as a barrier. It checks the kernel's index arithmetic,
// bounds and causal tiles against float64 loops, on ragged shapes (the scalar path) and aligned ones (float4).
// The kernel's text (from `constexpr int TILED_BK` to the launch helpers) is the test's KERNEL_TEXT file.
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>
#include <algorithm>
using std::min;
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx, blockIdx;
std::barrier<>* block_barrier;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
#define __global__
#define __device__
#define __forceinline__
#define __launch_bounds__(x)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#include KERNEL_TEXT

template <int BM, int BN, int TM, int TN, TiledLayout L, TiledCausal C>
void launch(dim3 grid, float* c, const float* a, const float* b, const float* bias, int M, int N, int K) {
    constexpr int threads = (BM / TM) * (BN / TN);
    std::barrier<> bar(threads);
    block_barrier = &bar;
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; t++)
            pool.emplace_back([=, &bar] {
                blockIdx = {x, y, z}; threadIdx = {(unsigned)t, 0, 0};
                // A thread that returns early (the whole block, SKIP_FUTURE_TILES) never reaches a barrier.
                tiled_matmul_kernel<BM, BN, TM, TN, L, C>(c, a, b, bias, M, N, K);
            });
        for (auto& p : pool) p.join();
    }
}
int fails = 0;
void check(const char* what, const std::vector<float>& got, const std::vector<double>& want, const std::vector<char>& needed) {
    double worst = 0; long bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        if (!needed[i]) continue;
        double e = std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i]));
        worst = std::max(worst, e);
        if (!(e < 1e-4)) bad++;
    }
    printf("%-48s worst rel err %.2e, bad %ld\n", what, worst, bad);
    if (bad) fails++;
}
int main() {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    auto fill = [&](std::vector<float>& v) { for (auto& x : v) x = u(rng); };
    // matmul_forward's shape: out (M, OC) = inp (M, C) @ weight (OC, C)^T + bias; ragged and aligned
    int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {130, 70, 36}, {256, 256, 64}, {37, 300, 19}, {129, 129, 132}};
    for (auto& s : shapes) {
        int M = s[0], N = s[1], K = s[2];
        std::vector<float> a(M * K), b(N * K), bias(N), c(M * N, NAN);
        fill(a); fill(b); fill(bias);
        std::vector<double> want(M * N); std::vector<char> all(M * N, 1);
        for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) {
            double acc = bias[j]; for (int k = 0; k < K; k++) acc += (double)a[i * K + k] * b[j * K + k]; want[i * N + j] = acc; }
        dim3 g{(unsigned)((N + 127) / 128), (unsigned)((M + 127) / 128), 1};
        launch<128, 128, 8, 8, TiledLayout::B_IS_N_BY_K, TiledCausal::FULL>(g, c.data(), a.data(), b.data(), bias.data(), M, N, K);
        char name[80]; snprintf(name, 80, "matmul M=%d N=%d K=%d", M, N, K); check(name, c, want, all);
    }
    // attention: scores q @ k^T (T x T per head, causal tiles skipped) and att @ v (T x HS), batched over z
    int cases[][3] = {{1, 64, 2}, {70, 64, 2}, {200, 64, 1}, {33, 12, 3}, {129, 8, 1}};
    for (auto& s : cases) {
        int T = s[0], HS = s[1], Z = s[2];
        std::vector<float> q(Z * T * HS), k(Z * T * HS), v(Z * T * HS), sc(Z * T * T, NAN), out(Z * T * HS, NAN);
        fill(q); fill(k); fill(v);
        std::vector<double> want(Z * T * T); std::vector<char> lower(Z * T * T, 0);
        for (int z = 0; z < Z; z++) for (int i = 0; i < T; i++) for (int j = 0; j < T; j++) {
            double acc = 0; for (int d = 0; d < HS; d++) acc += (double)q[(z * T + i) * HS + d] * k[(z * T + j) * HS + d];
            want[(z * T + i) * T + j] = acc; lower[(z * T + i) * T + j] = j <= i; }
        dim3 g{(unsigned)((T + 127) / 128), (unsigned)((T + 127) / 128), (unsigned)Z};
        launch<128, 128, 8, 8, TiledLayout::B_IS_N_BY_K, TiledCausal::SKIP_FUTURE_TILES>(g, sc.data(), q.data(), k.data(), nullptr, T, T, HS);
        char name[80]; snprintf(name, 80, "scores T=%d HS=%d Z=%d (causal part)", T, HS, Z); check(name, sc, want, lower);
        // att: causal, zero after the query, as the softmax leaves it
        std::vector<float> att(Z * T * T);
        for (int z = 0; z < Z; z++) for (int i = 0; i < T; i++) for (int j = 0; j < T; j++) att[(z * T + i) * T + j] = j <= i ? u(rng) : 0.0f;
        std::vector<double> want2(Z * T * HS); std::vector<char> all2(Z * T * HS, 1);
        for (int z = 0; z < Z; z++) for (int i = 0; i < T; i++) for (int d = 0; d < HS; d++) {
            double acc = 0; for (int j = 0; j < T; j++) acc += (double)att[(z * T + i) * T + j] * v[(z * T + j) * HS + d];
            want2[(z * T + i) * HS + d] = acc; }
        dim3 g2{(unsigned)((HS + 63) / 64), (unsigned)((T + 127) / 128), (unsigned)Z};
        launch<128, 64, 8, 4, TiledLayout::B_IS_K_BY_N, TiledCausal::STOP_AT_DIAGONAL>(g2, out.data(), att.data(), v.data(), nullptr, T, HS, T);
        snprintf(name, 80, "att@v T=%d HS=%d Z=%d", T, HS, Z); check(name, out, want2, all2);
    }
    printf(fails ? "FAILED %d\n" : "all passed\n", fails);
    return fails != 0;
}
