// A CTA-wide copy with many loads in flight per thread: element i (of n) is loaded by
// thread i % THREADS, BATCH of a thread's loads issued before any of their stores. Written
// as load, store, load, store, the loop waited on one memory round trip per element per
// thread (a store into shared memory through a generic pointer may alias the next load,
// so the compiler keeps their order): ~21 for the retrieval stream's 96 KB of queries at
// d = 768. The sample and threshold launches took as long with it as without, so their
// copies are not what bounds them.
#pragma once
#include "common/portable.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
// load(i) returns element i, store(i, v) puts it; both are called for i < n only.
template <int THREADS, int BATCH, class Load, class Store>
__device__ __forceinline__ void batched_copy(int n, int tid, Load load, Store store) {
  using T = decltype(load(0));
  for (int first = tid; first < n; first += THREADS * BATCH) {
    T v[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = first + u * THREADS;
      if (i < n) v[u] = load(i);
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = first + u * THREADS;
      if (i < n) store(i, v[u]);
    }
  }
}
#endif

}  // namespace winnow
