// CPU stand-in of templates/ptx/cluster.cuh for tests/emu/cuda_emulation.h: the rank and the
// CTAs of the cluster come from winnow_emu::launch_clusters; a remote arrival updates the
// barrier at the same offset in that CTA's table. Outside a cluster launch a kernel is a
// cluster of one (rank 0, the barrier is the CTA's).
#pragma once
#include "ptx/mbarrier.cuh"
#include "common/portable.cuh"

namespace winnow {

inline unsigned cluster_ctarank() { return winnow_emu::cluster_rank; }

inline void cluster_sync() {
  if (winnow_emu::cluster) winnow_emu::cluster->sync.arrive_and_wait();
  else winnow_emu::cta->sync.arrive_and_wait();
}

namespace emu_detail {
inline winnow_emu::Cta& cluster_cta(unsigned rank) {
  if (!winnow_emu::cluster) {
    if (rank != 0) winnow_emu::fail("a cluster rank above 0 outside a cluster launch");
    return *winnow_emu::cta;
  }
  if (rank >= winnow_emu::cluster->ctas.size()) winnow_emu::fail("mapa: a rank outside the cluster");
  return *winnow_emu::cluster->ctas[rank];
}
}  // namespace emu_detail

inline void mbarrier_arrive_cluster(u64* bar, unsigned rank) {
  emu_detail::update(emu_detail::cluster_cta(rank), shared_address(bar), 1, 0);
}

}  // namespace winnow
