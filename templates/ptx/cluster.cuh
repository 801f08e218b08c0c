// Thread-block clusters (sm_90): the CTA's rank in its cluster, the cluster-wide barrier,
// and an mbarrier arrival on the barrier at the same shared-memory offset in another CTA
// of the cluster (distributed shared memory: mapa, then a release at cluster scope). The
// kernel's cluster shape is fixed at compile time (__cluster_dims__ on the entry).
#pragma once
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"

// The entry's cluster shape (__cluster_dims__ on its declaration) under clang: clang 19
// ignores the toolkit's __cluster_dims__ ("unknown attribute cluster_dims"), so a cubin of
// the llvm backend had no cluster shape, and the ordinary launch ran the cluster
// instructions outside a cluster (an illegal instruction). Here it
// becomes an annotation that the llvm backend writes into the entry's PTX as NVRTC does
// (.explicitcluster, .reqnctapercluster; compiler/backend/llvm/cluster_dims.cpp).
#if defined(__clang__) && defined(__CUDA__)
#undef __cluster_dims__
#define __cluster_dims__(x, y, z) __attribute__((annotate("winnow.cluster_dims " #x " " #y " " #z)))
#endif

namespace winnow {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster arrives (release) and waits (acquire): what any
// of them wrote to shared memory before is visible to all after. Not .aligned: the threads
// may reach it from different places (a producer warp that leaves its loop early).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// One arrival on the mbarrier at `bar`'s offset in the shared memory of CTA `rank` of the
// cluster (this CTA's own when rank is its own), ordered after this thread's earlier
// accesses at cluster scope.
__device__ __forceinline__ void mbarrier_arrive_cluster(u64* bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(shared_address(bar)),
      "r"(rank)
      : "memory");
}
#endif

}  // namespace winnow
