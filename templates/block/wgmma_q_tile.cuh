// The q operand of the block kernels' wgmma forms (block attention, block scores): the 64
// rows of query block I that math warpgroup wg multiplies, copied from q [L][heads][d]
// (bf16, head h) into the swizzled K-major tile of the block's 128 rows
// (wgmma_tiles.cuh), then published to the async proxy wgmma reads through and to the
// warpgroup (named barrier 1 + wg, its 128 threads).
#pragma once
#include "block/block_params.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/wgmma_ops.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

// q by reference: by value, NVVM schedules the load of the kernel argument differently and
// the measured wgmma attention kernel's PTX would change (byte-identical this way).
template <int D, int H>
__device__ __forceinline__ void store_q_tile(const unsigned short* const& q, char* qs, int I, int h,
                                             int wg) {
  constexpr int CPR = D * 2 / 16;
  const int tw = int(threadIdx.x) & 127;
  for (int e = tw; e < 64 * CPR; e += 128) {
    const int r = wg * 64 + e / CPR, c = e % CPR;
    const long long row = (long long)I * kBlockTokens + r;
    const uint4 v = *reinterpret_cast<const uint4*>(q + (row * H + h) * D + c * 8);
    *reinterpret_cast<uint4*>(qs + swizzled_chunk<kBlockTokens>(r, c)) = v;
  }
  fence_async_smem();
  if (wg == 0) {
    named_barrier_sync<1, 128>();
  } else {
    named_barrier_sync<2, 128>();
  }
}

}  // namespace winnow
