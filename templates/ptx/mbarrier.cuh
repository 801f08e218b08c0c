// Shared-memory mbarriers (PTX ISA, "mbarrier"): the handshakes of a warp-specialised
// pipeline. A phase completes when its expected arrivals have arrived and, for copies by
// the tensor memory accelerator, its expected transaction bytes have landed; waiters name
// the parity of the phase they wait for. Also the CTA's named barriers, which let a subset
// of the warps (the math warpgroups) synchronise without the producer warp.
#pragma once
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"
#include "common/ring_slot.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__)
// One thread initialises; fence + barrier publish it to every thread and to the copy engine.
__device__ __forceinline__ void mbarrier_init(u64* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(u64* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(
                   shared_address(bar))
               : "memory");
}
// One arrival that also announces `bytes` of copies completing on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, unsigned bytes) {
  asm volatile(
      "{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
          shared_address(bar)),
      "r"(bytes)
      : "memory");
}
// One arrival, made when every cp.async this thread issued before it has completed (the
// arrival counts against the phase's expected arrivals: .noinc).
__device__ __forceinline__ void mbarrier_arrive_after_copies(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar))
               : "memory");
}
// Waits until at most `Pending` of this thread's cp.async groups are still in flight (the
// sample's gathered tiles: each lane waits for its copies before it arrives).
template <int Pending>
__device__ __forceinline__ void copies_landed() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
// Spins until the phase of parity `parity` has completed. A new barrier counts the phase
// before its first as complete: waiting for parity 1 returns at once.
__device__ __forceinline__ void mbarrier_wait(u64* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}
// The same on a barrier given by its shared-memory address (computed once per loop: no
// generic-to-shared conversion or 64-bit pointer arithmetic per tile).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Named barrier `id` (1..15; 0 is __syncthreads) over the first `threads` threads that
// reach it (a multiple of 32).
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(Id >= 1 && Id < 16 && Threads % 32 == 0, "named barriers 1..15, whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}
// Arrives on named barrier `id` without waiting (the other side syncs on it).
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier_arrive() {
  static_assert(Id >= 1 && Id < 16 && Threads % 32 == 0, "named barriers 1..15, whole warps");
  asm volatile("bar.arrive %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}
#endif

}  // namespace winnow
