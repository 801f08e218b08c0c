// L2-only loads (ld.global.cg) of words other CTAs write during the launch, written as
// CUDA's own __ldcg is: clang's CUDA headers (the LLVM backend) do not declare __ldcg, so
// both backends see these.
#pragma once
#include "common/portable.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ u32 load_cg(const u32* ptr) {
  u32 v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ u64 load_cg(const u64* ptr) {
  u64 v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint4 load_cg(const uint4* ptr) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}
#endif

}  // namespace winnow
