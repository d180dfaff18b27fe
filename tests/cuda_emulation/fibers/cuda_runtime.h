// A stand-in for <cuda_runtime.h> that runs a kernel file's launches on the CPU (tests/test_tiled_matmul_emulated.py):
// each block's threads are fibers (ucontext) run one after another until each reaches a __syncthreads() or
// returns, then the next round; __shared__ arrays are function statics, shared by the block's fibers (blocks run
// one at a time). Deterministic: a missing barrier shows as the same wrong answer on every run. The test turns
// `kernel<<<grid, block>>>(args);` into `kg_launch(grid, block, [=] { kernel(args); });` before compiling, and
// `extern __shared__ float smem[];` into a pointer to the launch's dynamic shared memory (kg::dynamic_shared).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <ucontext.h>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace kg {
constexpr size_t STACK_BYTES = 64 << 10;
inline ucontext_t scheduler;
inline std::vector<ucontext_t> fibers;
inline std::vector<std::vector<char>> stacks;
inline std::vector<char> finished;
inline std::vector<dim3> indices;
inline int current = 0;
inline const std::function<void()>* body = nullptr;
inline void entry() {
    (*body)();
    finished[current] = 1;  // then uc_link: back to the scheduler
}
}  // namespace kg

inline void __syncthreads() { swapcontext(&kg::fibers[kg::current], &kg::scheduler); }

// Warp shuffles, for kernels whose warps exchange values (every lane of the warp calling, as the mask says): each
// lane posts its value and yields; once the round has posted every lane's, each reads its source lane's. Two
// slot sets, alternated per call, so that a lane's next post never overwrites a value another lane has yet to read.
namespace kg {
inline std::vector<float> posted[2];
inline std::vector<int> calls;  // per thread: shuffles so far (which slot set is this call's)
inline float shuffle(float value, int source_lane) {
    int t = current, lane = t % 32, warp = t / 32;
    int set = calls[t]++ % 2;
    posted[set][t] = value;
    __syncthreads();  // the round's end: every lane of the block has posted (or returned)
    float got = posted[set][warp * 32 + source_lane];
    return got;
}
}  // namespace kg
inline void __syncwarp(unsigned = 0xffffffffu) { __syncthreads(); }  // lanes run one by one: a round's end
inline float __shfl_sync(unsigned, float value, int source_lane) { return kg::shuffle(value, source_lane & 31); }
inline float __shfl_xor_sync(unsigned, float value, int mask) {
    return kg::shuffle(value, (kg::current % 32) ^ mask);
}

namespace kg {
inline std::vector<char> dynamic_shared;  // `<<<grid, block, bytes>>>`'s bytes, shared by every block in turn
}  // namespace kg

inline void kg_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    int threads = (int)(block.x * block.y * block.z);
    kg::fibers.resize(threads);
    kg::finished.assign(threads, 0);
    kg::indices.resize(threads);
    while ((int)kg::stacks.size() < threads) kg::stacks.emplace_back(kg::STACK_BYTES);
    kg::body = &kernel;
    for (auto& set : kg::posted) set.assign(threads, 0.0f);
    blockDim = block;
    gridDim = grid;
    for (unsigned bz = 0; bz < grid.z; bz++) for (unsigned by = 0; by < grid.y; by++) for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx = dim3(bx, by, bz);
        for (int t = 0; t < threads; t++) {
            kg::indices[t] = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            kg::finished[t] = 0;
            if ((int)kg::calls.size() < threads) kg::calls.resize(threads);
            kg::calls[t] = 0;
            getcontext(&kg::fibers[t]);
            kg::fibers[t].uc_stack.ss_sp = kg::stacks[t].data();
            kg::fibers[t].uc_stack.ss_size = kg::STACK_BYTES;
            kg::fibers[t].uc_link = &kg::scheduler;
            makecontext(&kg::fibers[t], kg::entry, 0);
        }
        for (bool running = true; running;) {  // one round: every live thread up to its next barrier
            running = false;
            for (int t = 0; t < threads; t++) {
                if (kg::finished[t]) continue;
                kg::current = t;
                threadIdx = kg::indices[t];
                swapcontext(&kg::scheduler, &kg::fibers[t]);
                running = running || !kg::finished[t];
            }
        }
    }
}

inline void kg_launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& kernel) {
    kg::dynamic_shared.assign(shared_bytes, 0);
    kg_launch(grid, block, kernel);
}
