// The online softmax of the attention kernels' fragments (mma.sync and wgmma alike: a
// thread holds elements of two rows, g and g + 8, and the four threads of a quad hold a
// row between them): the row maxima and sums over the quad, in the exp2 domain.
#pragma once
#include "block/block_select_kernel.cuh"

namespace winnow {

// One tile's step for the two rows: mx (this thread's tile maxima) becomes the quad's, the
// running maxima m include it, the running sums l are rescaled and corr gets the factor by
// which the output accumulators are to be.
__device__ __forceinline__ void quad_row_maxima(float (&mx)[2], float (&m)[2], float (&l)[2],
                                                float (&corr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
    const float mn = fmaxf(m[r], mx[r]);
    corr[r] = rescale(m[r], mn);
    m[r] = mn;
    l[r] = __fmul_rn(l[r], corr[r]);
  }
}

// After the last tile: the rows' sums over the quad and their inverses (0: an empty row).
__device__ __forceinline__ void quad_row_inverses(float (&l)[2], float (&inv)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xFFFFFFFFu, l[r], 1));
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xFFFFFFFFu, l[r], 2));
    inv[r] = l[r] > 0.0f ? __fdiv_rn(1.0f, l[r]) : 0.0f;
  }
}

}  // namespace winnow
