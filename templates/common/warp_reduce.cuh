// Warp-wide unsigned min / max (redux.sync, sm_80+), written as inline PTX for both
// backends: clang 19's CUDA header passes __reduce_min_sync's and __reduce_max_sync's
// arguments to the builtins in the wrong order (mask as the value, the value as the member
// mask), so the llvm build reduced the mask under a member mask made of the data, an
// illegal instruction on the GPU (compute-sanitizer points at the WARPSYNC before
// REDUX.MAX in knn_tighten). NVRTC's __reduce_*_sync emit the same redux.sync as these.
#pragma once
#include "common/portable.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ u32 warp_min_u32(unsigned mask, u32 value) {
  u32 r;
  asm volatile("redux.sync.min.u32 %0, %1, %2;" : "=r"(r) : "r"(value), "r"(mask));
  return r;
}
__device__ __forceinline__ u32 warp_max_u32(unsigned mask, u32 value) {
  u32 r;
  asm volatile("redux.sync.max.u32 %0, %1, %2;" : "=r"(r) : "r"(value), "r"(mask));
  return r;
}
#endif

}  // namespace winnow
