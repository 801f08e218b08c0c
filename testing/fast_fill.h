// Fast host-side filling of large random inputs (benchmarks, big tests): a parallel loop
// over every core and a table-driven xorshift64* stream per chunk.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace winnow::ops {

// Runs f(0) .. f(n - 1) on every core but `spare` of them (at least one).
template <class F>
inline void parallel_for(size_t n, const F& f, unsigned spare = 0) {
  const unsigned cores = std::thread::hardware_concurrency();
  const size_t threads = std::min<size_t>(n, std::max(1u, cores > spare ? cores - spare : 1u));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < n;) f(i);
    });
  for (std::thread& t : pool) t.join();
}

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Codes drawn from a table of 65536 encoded samples of the distribution, by a xorshift64*
// stream per chunk: values distributed as the samples are (N(0,1) to the table's
// resolution, every code of fp8), at memory speed instead of the encoder's (5M x 768
// values are 3.9 billion).
template <class Code>
inline void fill_chunk(Code* dst, size_t n, const Code* table, uint64_t state) {
  state |= 1;
  for (size_t i = 0; i < n; ++i) {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    dst[i] = table[(state * 0x2545F4914F6CDD1Dull) >> 48];
  }
}

}  // namespace winnow::ops
