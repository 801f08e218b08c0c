// Input validation for the topk op: every rule a caller can break, each with a message
// that names the field, what was given and what is allowed. Throws InvalidArgument or
// NotSupported (ops/common/errors.h). No device access: runs on machines with no GPU.
#pragma once
#include <cstddef>

#include "ops/common/topk_op.h"

namespace winnow::ops {

// Upper limits of the plan's tuning fields (winnow.h states them as
// WINNOW_MAX_CANDIDATE_CAPACITY, WINNOW_MAX_SAMPLE_SIZE, WINNOW_MAX_KEY_SPLITS). The first
// two become constants of the kernel (candidate buffer words per row, sample keys); beyond
// these the kernel's int arithmetic and its workspace (8 bytes per candidate per row of a
// CTA) become absurd. 262144 is 8x the default of k = 8192; key splits are also capped per
// call by the CTAs that fit on the device.
inline constexpr int kMaxCandidateCapacity = 262144;
inline constexpr int kMaxSampleSize = 65536;
inline constexpr int kMaxKeySplits = 1024;
inline constexpr int kMaxCtasPerSm = 32;  // the most resident CTAs an SM of sm_90 / sm_100 runs

// The problem alone: the arch (sm_90a or sm_100a), k in [1, kMaxK] (TopK mode), heads in
// [1, kMaxHeads], head_dim a multiple of 16 in [16, kMaxHeadDim], dtypes, causal_ratio >= 1
// and causal_offset >= 0 (causal windows only: other windows ignore both), sample_size in
// [-1, kMaxSampleSize], candidate_capacity in [0, kMaxCandidateCapacity], key_splits in
// [0, kMaxKeySplits], shard_key_offset in [0, total_keys) (0 when total_keys is 0: not
// sharded; sharded plans in top-k mode only), the score program verified for these heads (ir::verify; its
// UserError becomes InvalidArgument with the same message).
void validate_problem(const TopkProblem& p);

// One call's tensors against the problem: presence of every input the program reads
// (weights iff it reads w, key_scale iff kscale, window arrays iff Ranges), dtype,
// ndim and shape, inner strides (contiguous rows), 16-byte alignment of q and k rows,
// null pointers, the device ordinal, sizes below 2^31, causal windows that would run
// past num_keys, the outputs' shapes, and the workspace (pointer, 256-byte alignment,
// size >= required), and the sample hint (int32 [n], n <= max_hint_keys; none allowed
// when max_hint_keys is 0, as in materialize mode). causal_offset: the call's (-1: the
// problem's); max_hint_keys -1: no limit.
struct CallShape {
  int64_t rows = 0;
  int64_t num_keys = 0;
};
CallShape validate_call(const TopkProblem& p, int device, const TopkInputs& in,
                        const TensorView* out_indices, const TensorView* out_scores,
                        const void* workspace, size_t workspace_bytes, size_t required_bytes,
                        int64_t causal_offset = -1, int64_t max_hint_keys = -1);

}  // namespace winnow::ops
