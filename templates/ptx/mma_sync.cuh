// Warp-level tensor-core and copy primitives shared by the kernels (sm_80+ PTX):
// mma.sync m16n8k16 on bf16, ldmatrix, cp.async, an L2-only load, and bf16 packing.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// c += A (16 x 16 bf16, fragment a) * B (16 x 8 bf16, fragment b0 b1), fp32 accumulation.
__device__ __forceinline__ void mma_bf16_16816(const u32 (&a)[4], u32 b0, u32 b1, float& c0,
                                               float& c1, float& c2, float& c3) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 -> one register of two bf16 (round to nearest even); lo in the low half.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned shared_address(const void* smem) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(smem));
  return unsigned(a);
}

// One float from a shared-window address (shared_address): a loop that steps an integer
// address needs no generic-to-shared conversion per access. Volatile: it stays after the
// wait that makes the stage's contents visible.
__device__ __forceinline__ float ld_shared_f32(unsigned addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// Four 8 x 8 b16 matrices: lanes 8i..8i+7 give the row addresses of matrix i; lane l
// gets row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of each (an mma B fragment when the
// rows are the B columns).
__device__ __forceinline__ void ldmatrix_x4(const void* row, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(shared_address(row)));
}

// Four transposed 8 x 8 b16 matrices: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(const void* row, u32& r0, u32& r1, u32& r2,
                                                  u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(shared_address(row)));
}

// Asynchronous 16- and 4-byte global -> shared copies (cp.async, sm_80+): the next tile loads
// while the current one is used. valid == false fills the slot with zeros.
__device__ __forceinline__ void copy_async_16(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(smem)),
               "l"(global), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_async_4(void* smem, const void* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(smem)),
               "l"(global), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int Pending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace winnow
