// Runs the block kernels' device code on the CPU: one std::thread per CUDA thread, a
// barrier per CTA for __syncthreads and one per warp for the warp-level exchanges
// (shuffles, ballots, mma.sync and ldmatrix fragments, emulated from the PTX ISA's
// fragment layouts in tests/emu/ptx/mma_sync.cuh and wgmma_ops.cuh), the CTA's
// mbarriers and named barriers (tests/emu/ptx/mbarrier.cuh) and TMA loads
// (tests/emu/ptx/tma.cuh); launch_clusters runs the CTAs of a cluster at once, each with
// its own shared memory. Slow, and only for tiny problems: it checks the kernels'
// indexing, fragment bookkeeping and pipeline handshakes without a GPU, not their speed
// (a missing arrival hangs here as it would there; a misuse the hardware leaves undefined
// stops the test with a message). Include it before any template.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <stdexcept>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static  // CTAs run one after another
#define __launch_bounds__(...)
#define __grid_constant__

namespace winnow_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Warp {
  std::barrier<> sync{32};
  int regs = 0;  // registers per thread after setmaxnreg (0: the launch count)
  uint32_t slots[32][8] = {};
  const void* addresses[32] = {};
};

// A misuse the hardware leaves undefined: the emulation stops there, saying what.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "cuda emulation: %s\n", what);
  std::abort();
}

// One shared-memory mbarrier (PTX ISA "mbarrier"): the current phase's parity, its pending
// arrivals (of `expected`) and transaction bytes still to land.
struct Mbarrier {
  int expected, pending;
  long long tx;
  int phase;
};

struct Cta {
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
  std::mutex mbar_mutex;
  std::condition_variable mbar_changed;
  std::map<unsigned, Mbarrier> mbars;  // by shared-memory address
  std::mutex named_mutex;
  std::map<int, std::unique_ptr<std::barrier<>>> named_barriers;
  // setmaxnreg's pool: registers given back by warps and not yet taken (launch_regs > 0).
  std::mutex reg_mutex;
  std::condition_variable reg_changed;
  long long free_regs = 0;
  // __syncthreads is bar.sync 0, an aligned barrier: every thread of the CTA must reach
  // it at the same instruction (PTX ISA, "barrier"); the first arrival of each phase
  // records its call site and every other arrival of that phase must match it.
  std::mutex site_mutex;
  std::source_location site;
  unsigned site_arrivals = 0, threads;
  explicit Cta(unsigned threads) : sync(std::ptrdiff_t(threads)), threads(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>());
  }
  // Named barrier `id` over `threads` threads (bar.sync id, threads): made on first use.
  std::barrier<>& named(int id, int threads) {
    std::lock_guard<std::mutex> lock(named_mutex);
    auto& b = named_barriers[id];
    if (!b) b = std::make_unique<std::barrier<>>(std::ptrdiff_t(threads));
    return *b;
  }
};

// Registers per thread at launch, for the setmaxnreg model (register_limit): 0 leaves it
// out (setmaxnreg is then a no-op); a test of a kernel that moves registers sets it.
inline int launch_regs = 0;

// The shared memory of the CTA running now (CTAs run one after another): shared
// addresses (shared_address, wgmma descriptors, mbarriers) count from it.
inline unsigned char* shared_window = nullptr;

inline thread_local Dim3 thread_idx, block_idx, block_dim;
inline thread_local Cta* cta = nullptr;
// In a cluster launch: this CTA's shared memory (else null: a CTA of an ordinary launch,
// whose shared memory is shared_window).
inline thread_local unsigned char* cta_window = nullptr;
inline unsigned char* window() { return cta_window ? cta_window : shared_window; }
inline thread_local Warp* warp = nullptr;
inline thread_local unsigned lane = 0;

// Stops the test when the CTA it watches has not finished within two minutes: a barrier
// (__syncthreads, a named barrier, __syncwarp) that misses an arrival hangs the kernel on
// the GPU and would hang the test here (mbarrier waits have their own watchdog).
class CtaWatchdog {
 public:
  CtaWatchdog()
      : thread_([this] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!done_changed_.wait_for(lock, std::chrono::seconds(120), [this] { return done_; }))
            fail("a CTA did not finish within 120 s (a barrier missing an arrival?)");
        }) {}
  ~CtaWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;
};

// Runs body() as every thread of every CTA of the grid (threads a multiple of 32).
template <class Body>
void launch(unsigned grid_x, unsigned grid_y, unsigned threads, const Body& body) {
  for (unsigned by = 0; by < grid_y; ++by) {
    for (unsigned bx = 0; bx < grid_x; ++bx) {
      Cta c(threads);
      CtaWatchdog watchdog;
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

// Runs body(smem) as every thread of every CTA of a 1-D grid of clusters of `cluster_x`
// CTAs (grid_x a multiple of it): the CTAs of one cluster at once, clusters one after
// another; each CTA gets `smem_bytes` of its own shared memory (1024-byte aligned, filled
// with 0xA5 so that a read of what no one wrote shows), passed to the body. A kernel with
// static __shared__ variables cannot run here: they are one variable for every CTA.
template <class Body>
void launch_clusters(unsigned grid_x, unsigned cluster_x, unsigned threads, size_t smem_bytes,
                     const Body& body) {
  if (cluster_x == 0 || grid_x % cluster_x != 0) fail("a cluster launch needs grid_x a multiple of the cluster");
  for (unsigned first = 0; first < grid_x; first += cluster_x) {
    std::vector<std::unique_ptr<Cta>> ctas;
    std::vector<std::vector<unsigned char>> memory;
    std::vector<unsigned char*> windows;
    for (unsigned r = 0; r < cluster_x; ++r) {
      ctas.push_back(std::make_unique<Cta>(threads));
      memory.emplace_back(smem_bytes + 1024, (unsigned char)0xA5);
      unsigned char* m = memory.back().data();
      windows.push_back(m + (1024 - reinterpret_cast<uintptr_t>(m) % 1024) % 1024);
    }
    CtaWatchdog watchdog;
    std::vector<std::thread> pool;
    for (unsigned r = 0; r < cluster_x; ++r) {
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, r, t] {
          thread_idx = {t, 0, 0};
          block_idx = {first + r, 0, 0};
          block_dim = {threads, 1, 1};
          cta = ctas[r].get();
          warp = cta->warps[t / 32].get();
          lane = t % 32;
          cta_window = windows[r];
          body(windows[r]);
        });
      }
    }
    for (std::thread& th : pool) th.join();
  }
}

// setmaxnreg.{inc,dec}.sync.aligned (PTX ISA): the warp's registers per thread move to
// `regs`, a decrease giving 32 x the difference to the CTA's pool, an increase waiting
// until the pool holds that many (a warp that waits a minute stops the test: on the GPU it
// would hang). Every lane of the warp calls it.
inline void register_limit(int regs, bool increase) {
  warp->sync.arrive_and_wait();
  if (lane == 0 && launch_regs > 0) {
    const int cur = warp->regs ? warp->regs : launch_regs;
    if (increase ? regs < cur : regs > cur) fail("setmaxnreg: inc below, or dec above, the warp's count");
    const long long moved = 32ll * (increase ? regs - cur : cur - regs);
    std::unique_lock<std::mutex> lock(cta->reg_mutex);
    if (increase) {
      if (!cta->reg_changed.wait_for(lock, std::chrono::seconds(60), [&] { return cta->free_regs >= moved; }))
        fail("setmaxnreg.inc: no registers were given back within 60 s (a hang on the GPU)");
      cta->free_regs -= moved;
    } else {
      cta->free_regs += moved;
      cta->reg_changed.notify_all();
    }
    warp->regs = regs;
  }
  warp->sync.arrive_and_wait();
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

// Checks that every arrival of this phase comes from one call site (a source line: the
// instances of one template line are not told apart), then waits for the phase.
inline void __syncthreads(std::source_location at = std::source_location::current()) {
  winnow_emu::Cta& c = *winnow_emu::cta;
  {
    std::lock_guard<std::mutex> lock(c.site_mutex);
    if (c.site_arrivals == 0) {
      c.site = at;
    } else if (c.site.line() != at.line() || std::strcmp(c.site.file_name(), at.file_name()) != 0) {
      std::fprintf(stderr, "cuda emulation: __syncthreads reached at %s:%u by thread %u and at %s:%u by another thread of the same phase\n",
                   at.file_name(), unsigned(at.line()), winnow_emu::thread_idx.x, c.site.file_name(),
                   unsigned(c.site.line()));
      winnow_emu::fail("__syncthreads at different call sites in one phase (an unaligned barrier)");
    }
    if (++c.site_arrivals == c.threads) c.site_arrivals = 0;
  }
  c.sync.arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { winnow_emu::warp->sync.arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline long long clock64() { return 0; }

struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
// Warp votes over a partial warp are not emulated (the kernels' other collectives use the
// whole warp): a kernel compiled for the emulation must not reach these.
inline unsigned __activemask() { winnow_emu::fail("__activemask is not emulated"); }
inline unsigned __match_any_sync(unsigned, unsigned) { winnow_emu::fail("__match_any_sync is not emulated"); }

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
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(unsigned v) { return __builtin_ffs(int(v)); }
inline int __clz(unsigned v) { return v == 0 ? 32 : __builtin_clz(v); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// Atomics on shared or global words: std::atomic_ref over the same memory.
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p);
  unsigned old = a.load();
  while (old > v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
inline unsigned atomicOr(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }
inline unsigned atomicMax(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p);
  unsigned old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

namespace winnow_emu {
// Every lane of the warp takes part (mask 0xFFFFFFFF: the kernels' only form); lane
// `src(lane)` in range gives its value, else the lane keeps its own (as __shfl_up/down do).
template <class T, class Src>
T shuffle(T v, Src src) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- and 64-bit values");
  constexpr int n = int(sizeof(T) / 4);
  uint32_t w[n];
  std::memcpy(w, &v, sizeof(T));
  publish(w, n);
  const int from = src(int(lane));
  if (from >= 0 && from < 32) std::memcpy(&v, &warp->slots[from][0], sizeof(T));
  done_reading();
  return v;
}
}  // namespace winnow_emu

template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  return winnow_emu::shuffle(v, [&](int l) { return l ^ offset; });
}
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = 32) {
  if (width != 32) winnow_emu::fail("__shfl_sync: only whole warps are emulated");
  return winnow_emu::shuffle(v, [&](int) { return src & 31; });
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta) {
  return winnow_emu::shuffle(v, [&](int l) { return l - int(delta); });
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta) {
  return winnow_emu::shuffle(v, [&](int l) { return l + int(delta); });
}

inline unsigned __ballot_sync(unsigned, bool p) {
  const uint32_t w = p;
  winnow_emu::publish(&w, 1);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= (winnow_emu::warp->slots[l][0] ? 1u : 0u) << l;
  winnow_emu::done_reading();
  return bits;
}
