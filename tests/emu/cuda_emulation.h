// Runs the block kernels' device code on the CPU: one std::thread per CUDA thread, a
// barrier per CTA for __syncthreads and one per warp for the warp-level exchanges
// (shuffles, ballots, mma.sync and ldmatrix fragments, emulated from the PTX ISA's
// fragment layouts in tests/emu/winnow/mma_sync.cuh). Slow, and only for tiny problems:
// it checks the kernels' indexing and fragment bookkeeping without a GPU, not their speed.
// Include it before any template.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static  // CTAs run one after another
#define __launch_bounds__(...)

namespace winnow_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Warp {
  std::barrier<> sync{32};
  uint32_t slots[32][8] = {};
  const void* addresses[32] = {};
};

struct Cta {
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
  explicit Cta(unsigned threads) : sync(std::ptrdiff_t(threads)) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
  }
};

inline thread_local Dim3 thread_idx, block_idx, block_dim;
inline thread_local Cta* cta = nullptr;
inline thread_local Warp* warp = nullptr;
inline thread_local unsigned lane = 0;

// Runs body() as every thread of every CTA of the grid (threads a multiple of 32).
template <class Body>
void launch(unsigned grid_x, unsigned grid_y, unsigned threads, const Body& body) {
  for (unsigned by = 0; by < grid_y; ++by) {
    for (unsigned bx = 0; bx < grid_x; ++bx) {
      Cta c(threads);
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          thread_idx = {t, 0, 0};
          block_idx = {bx, by, 0};
          block_dim = {threads, 1, 1};
          cta = &c;
          warp = c.warps[t / 32].get();
          lane = t % 32;
          body();
        });
      }
      for (std::thread& th : pool) th.join();
    }
  }
}

// Every lane publishes `words` 32-bit words; after the call each lane can read all lanes'.
inline void publish(const uint32_t* words, int n) {
  std::memcpy(warp->slots[lane], words, size_t(n) * 4);
  warp->sync.arrive_and_wait();
}
inline void done_reading() { warp->sync.arrive_and_wait(); }

}  // namespace winnow_emu

#define threadIdx winnow_emu::thread_idx
#define blockIdx winnow_emu::block_idx
#define blockDim winnow_emu::block_dim

inline void __syncthreads() { winnow_emu::cta->sync.arrive_and_wait(); }

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int min(int a, int b) { return a < b ? a : b; }

template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  static_assert(sizeof(T) == 4, "32-bit values");
  uint32_t w;
  std::memcpy(&w, &v, 4);
  winnow_emu::publish(&w, 1);
  std::memcpy(&v, &winnow_emu::warp->slots[winnow_emu::lane ^ unsigned(offset)][0], 4);
  winnow_emu::done_reading();
  return v;
}

inline unsigned __ballot_sync(unsigned, bool p) {
  const uint32_t w = p;
  winnow_emu::publish(&w, 1);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= (winnow_emu::warp->slots[l][0] ? 1u : 0u) << l;
  winnow_emu::done_reading();
  return bits;
}
