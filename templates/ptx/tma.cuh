// Bulk tensor copies by the tensor memory accelerator (TMA, sm_90): a tensor map built on
// the host (cuTensorMapEncodeTiled, at execute time from the caller's pointers: no
// allocation, no synchronisation) and passed by value as a __grid_constant__ kernel
// parameter; one instruction copies a box of the tensor into shared memory, swizzled as
// the map says, zero-filling what lies outside the tensor, and completes on an mbarrier.
#pragma once
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"
#include "ptx/tma_map.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void tma_prefetch(const TmaMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}
// Copies the box at coordinates (c0 innermost, c1) into dst (shared, aligned as the
// swizzle needs: 1024 bytes for 128-byte swizzle); completes `bar`'s transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<u64>(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1)
      : "memory");
}
#endif

}  // namespace winnow
