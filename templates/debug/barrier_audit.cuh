// Sanitizer experiment -DWINNOW_BARRIER_AUDIT=1: checks on the GPU that every thread of a
// CTA passes the same sequence of __syncthreads() call sites, which barrier.sync.aligned
// requires. Each thread folds the site of every CTA barrier it passes into its own hash
// (a global slot per thread, so the audit itself adds no shared memory and nothing that
// racecheck tracks); at the kernel's end every thread compares its hash with thread 0's
// and traps, printing both, where they differ. Why: racecheck reports hazards
// between the producer warp (threads 256..287) and warp 0 across the select's CTA
// barriers; an audited run that passes shows that those barriers pair the same call sites
// in every thread, so they order those accesses, and the reports are racecheck's view of
// a CTA whose producer warp waits on mbarriers, not races.
//
// Include this header first: the __syncthreads() of every header after it is audited.
#pragma once

#ifndef WINNOW_BARRIER_AUDIT
#define WINNOW_BARRIER_AUDIT 0
#endif

namespace winnow {

#if WINNOW_BARRIER_AUDIT && defined(__CUDA_ARCH__)
enum : unsigned { kBarrierAuditCtas = 1024, kBarrierAuditThreads = 1024 };
__device__ unsigned barrier_audit_hash[kBarrierAuditCtas * kBarrierAuditThreads];

__device__ __forceinline__ unsigned* barrier_audit_slot() {
  return blockIdx.x < kBarrierAuditCtas
             ? barrier_audit_hash + blockIdx.x * kBarrierAuditThreads + threadIdx.x
             : nullptr;
}
// At the kernel's start, before its first CTA barrier.
__device__ __forceinline__ void barrier_audit_begin() {
  if (unsigned* h = barrier_audit_slot()) *h = 2166136261u;
}
// A call site: its file and line (NVRTC has no __COUNTER__), folded at compile time.
__device__ constexpr unsigned barrier_audit_site(const char* file, unsigned line) {
  unsigned h = 2166136261u;
  for (; *file; ++file) h = (h ^ unsigned(*file)) * 16777619u;
  return (h ^ line) * 16777619u;
}
__device__ __forceinline__ void audited_syncthreads(unsigned site) {
  if (unsigned* h = barrier_audit_slot()) *h = (*h ^ site) * 16777619u;  // FNV-1a step
  (__syncthreads)();
}
// Whether this thread passed the same __syncthreads() sites as thread 0; called by every
// thread at the kernel's end (a CTA barrier first, not a site).
__device__ __forceinline__ bool barrier_audit_agrees() {
  (__syncthreads)();
  const unsigned* h = barrier_audit_slot();
  if (!h) return true;
  const unsigned mine = *h, first = *(h - threadIdx.x);
  if (mine != first)
    printf("winnow barrier audit: CTA %u thread %u passed other __syncthreads() sites than "
           "thread 0 (hash %08x, thread 0's %08x)\n", blockIdx.x, threadIdx.x, mine, first);
  return mine == first;
}
__device__ __forceinline__ void barrier_audit_end() {
  if (!barrier_audit_agrees()) __trap();
}
#define __syncthreads() ::winnow::audited_syncthreads(::winnow::barrier_audit_site(__FILE__, __LINE__))
#else
__device__ __forceinline__ void barrier_audit_begin() {}
__device__ __forceinline__ void barrier_audit_end() {}  // audits nothing when off
#endif

}  // namespace winnow
