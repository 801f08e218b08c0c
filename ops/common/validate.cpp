#include "ops/common/validate.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

#include "ops/common/tensor_rules.h"
#include "knn/knn_workspace.cuh"
#include "topk/sample_keys.cuh"

namespace winnow::ops {

// The kernels' sample arithmetic is 32-bit (templates/topk/sample_keys.cuh).
static_assert(kMaxSampleSize <= winnow::kMaxStridedSample && kMaxK <= 8192);

namespace {

bool is_score_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::E4M3;
}

bool given(const TensorView* t) { return t != nullptr && t->present(); }

// An input the program reads must be there; one it does not read must not be.
bool require_iff(const char* name, const TensorView& t, bool needed, const char* needed_because,
                 const char* unneeded_because) {
  if (needed && !t.present()) fail(fmt::format("{} missing: {}", name, needed_because));
  if (!needed && t.present()) fail(fmt::format("{} given but {}", name, unneeded_because));
  return needed;
}

// [rows, cols] with contiguous rows (outputs, weights).
void check_matrix(const char* name, const TensorView& t, DType dtype, int device, int64_t rows,
                  int64_t cols, const char* cols_name) {
  TensorRules r(name, t);
  r.basics(dtype, device, 2, fmt::format("[rows, {}]", cols_name).c_str());
  r.dim(0, rows, "rows");
  r.dim(1, cols, cols_name);
  r.stride(1, 1, "elements of a row must be contiguous");
  r.min_stride(0, cols, cols_name);
}

}  // namespace

void validate_problem(const TopkProblem& p) {
  if (!p.score) fail("score program is missing (null)");
  // The kernels use cp.async, fp8 mma.sync and 227 KB of shared memory, wgmma on sm_90a;
  // only the two targets that are compiled and tested are taken.
  if (!backend::is_supported(p.arch))
    throw NotSupported(fmt::format("arch {} is not supported: winnow supports {}", p.arch.str(),
                                   backend::supported_archs()));
  if (p.heads < 1 || p.heads > kMaxHeads)
    fail(fmt::format("heads = {} is outside the supported range 1..{}", p.heads, kMaxHeads));
  if (p.head_dim < 16 || p.head_dim > kMaxHeadDim || p.head_dim % 16 != 0)
    fail(fmt::format("head_dim = {} is not supported: must be a multiple of 16 in 16..{}",
                     p.head_dim, kMaxHeadDim));
  if (!is_score_dtype(p.q_dtype))
    fail(fmt::format("q_dtype = {} is not supported: use fp32, fp16, bf16 or fp8_e4m3",
                     dtype_name(p.q_dtype)));
  if (!is_score_dtype(p.k_dtype))
    fail(fmt::format("k_dtype = {} is not supported: use fp32, fp16, bf16 or fp8_e4m3",
                     dtype_name(p.k_dtype)));
  if (p.mode == Mode::TopK) {
    if (p.k < 1) fail(fmt::format("k must be at least 1 (got k = {})", p.k));
    if (p.k > kMaxK) fail(fmt::format("k = {} exceeds the maximum {}", p.k, kMaxK));
  }
  // The fields of a causal window mean nothing to the others, so are not checked there.
  if (p.window == WindowKind::Causal && p.causal_ratio < 1)
    fail(fmt::format("causal_ratio = {} must be >= 1", p.causal_ratio));
  if (p.window == WindowKind::Causal && p.causal_offset < 0)
    fail(fmt::format("causal_offset = {} must be >= 0", p.causal_offset));
  if (p.sample_size < -1 || p.sample_size > kMaxSampleSize)
    fail(fmt::format("sample_size = {} is outside -1..{} (-1: default, 0: none)", p.sample_size,
                     kMaxSampleSize));
  if (p.candidate_capacity < 0 || p.candidate_capacity > kMaxCandidateCapacity)
    fail(fmt::format("candidate_capacity = {} is outside 0..{} (0: default)",
                     p.candidate_capacity, kMaxCandidateCapacity));
  if (p.key_splits < 0 || p.key_splits > kMaxKeySplits)
    fail(fmt::format("key_splits = {} is outside 0..{} (0: chosen per call)", p.key_splits,
                     kMaxKeySplits));
  const plan::PlanKnobs& kn = p.plan_knobs;
  if (kn.rows_per_cta < 0 || kn.rows_per_cta > 16)
    fail(fmt::format("rows_per_cta = {} is outside 0..16 (0: heuristic)", kn.rows_per_cta));
  if (kn.key_tile != 0 && kn.key_tile != 16 && kn.key_tile != 32 && kn.key_tile != 64 &&
      kn.key_tile != 128)
    fail(fmt::format("key_tile = {} must be 16, 32, 64 or 128 (0: heuristic)", kn.key_tile));
  if (kn.pipeline < 0 || kn.pipeline > 1)
    fail(fmt::format("pipeline = {} must be 0 (heuristic) or 1 (pipelined)", kn.pipeline));
  if (kn.bins < 0 || kn.bins > 2048 || kn.bins % 32 != 0)
    fail(fmt::format("bins = {} must be a multiple of 32 in 32..2048 (0: heuristic)", kn.bins));
  if (kn.stages != 0 && (kn.stages < 2 || kn.stages > kKnnMaxStages))
    fail(fmt::format("stages = {} must be in 2..{} (0: heuristic)", kn.stages, kKnnMaxStages));
  if (p.max_ctas_per_sm < 0 || p.max_ctas_per_sm > kMaxCtasPerSm)
    fail(fmt::format("max_ctas_per_sm = {} is outside 0..{} (0: as many as fit)",
                     p.max_ctas_per_sm, kMaxCtasPerSm));
  if (p.total_keys < 0 || p.total_keys > std::numeric_limits<int32_t>::max())
    fail(fmt::format("total_keys = {} is outside 0..{} (0: not sharded)", p.total_keys,
                     std::numeric_limits<int32_t>::max()));
  if (p.shard_key_offset < 0 || (p.total_keys == 0 && p.shard_key_offset != 0) ||
      (p.total_keys > 0 && p.shard_key_offset >= p.total_keys))
    fail(fmt::format("shard_key_offset = {} must be in 0..total_keys - 1 = {} (0 when not "
                     "sharded)",
                     p.shard_key_offset, p.total_keys - 1));
  if (p.sharded() && p.mode != Mode::TopK)
    fail("a sharded plan must be in top-k mode: materialize mode has nothing to merge");
  if (p.negate_scores && p.mode != Mode::TopK)
    fail("distance output is for top-k mode: materialize mode writes the scores themselves");
  if (p.negate_scores && p.sharded())
    fail("distance output on a sharded plan: the merge ranks by the shards' scores (negate "
         "the merged scores instead)");
  try {
    ir::verify(p.score, p.heads, p.expression);
  } catch (const ir::UserError& e) {
    if (e.position() >= 0)
      fail(fmt::format("score program: {} (at position {})", e.what(), e.position()));
    fail(fmt::format("score program: {}", e.what()));
  }
}

CallShape validate_call(const TopkProblem& p, int device, const TopkInputs& in,
                        const TensorView* out_indices, const TensorView* out_scores,
                        const void* workspace, size_t workspace_bytes, size_t required_bytes,
                        int64_t causal_offset, int64_t max_hint_keys) {
  const int64_t H = p.heads, d = p.head_dim;
  if (causal_offset < 0) causal_offset = p.causal_offset;

  // q: [rows, H, d], or [rows, d] when H == 1.
  if (!in.q.present()) fail("q missing: every call needs the queries");
  {
    TensorRules r("q", in.q);
    if (H == 1 && in.q.ndim == 2) {
      r.basics(p.q_dtype, device, 2, "[rows, d]");
      r.dim(1, d, "head_dim");
      r.stride(1, 1, "elements of a row must be contiguous");
      r.min_stride(0, d, "head_dim");
    } else {
      r.basics(p.q_dtype, device, 3, H == 1 ? "[rows, H, d] or [rows, d]" : "[rows, H, d]");
      r.dim(1, H, "heads");
      r.dim(2, d, "head_dim");
      r.stride(2, 1, "elements of a head must be contiguous");
      r.stride(1, d, "heads of a row must be contiguous, stride head_dim");
      r.min_stride(0, H * d, "heads * head_dim");
    }
    r.vector_rows(0);
  }
  const int64_t rows = in.q.shape[0];

  // k: [num_keys, d].
  if (!in.k.present()) fail("k missing: every call needs the keys");
  {
    TensorRules r("k", in.k);
    r.basics(p.k_dtype, device, 2, "[num_keys, d]");
    r.dim(1, d, "head_dim");
    r.stride(1, 1, "elements of a key must be contiguous");
    r.min_stride(0, d, "head_dim");
    r.vector_rows(0);
  }
  const int64_t num_keys = in.k.shape[0];
  // Sharded: k holds keys [shard_key_offset, + num_keys) of total_keys, and windows are in
  // global key numbers.
  const int64_t window_limit = p.sharded() ? p.total_keys : num_keys;
  if (p.sharded() && num_keys > p.total_keys - p.shard_key_offset)
    fail(fmt::format("k: shape[0] is {}, but the shard holds keys {}..{} of total_keys {}: at "
                     "most {}",
                     num_keys, p.shard_key_offset, p.total_keys - 1, p.total_keys,
                     p.total_keys - p.shard_key_offset));

  const ir::Uses uses = ir::uses(p.score);
  if (require_iff("weights", in.weights, uses.w,
                  "the score program reads w (fp32 [rows, heads])",
                  "the score program does not read w"))
    check_matrix("weights", in.weights, DType::F32, device, rows, H, "heads");
  if (require_iff("key_scale", in.key_scale, uses.kscale,
                  "the score program reads kscale (fp32 [num_keys])",
                  "the score program does not read kscale"))
    check_vector("key_scale", in.key_scale, DType::F32, device, num_keys, "num_keys");
  if (in.key_norms.present()) {  // optional: the kernel sums the squares without it
    if (!uses.ksq)
      fail("key_norms given, but the score program does not read ksq (|k|^2: l2, cosine)");
    check_vector("key_norms", in.key_norms, DType::F32, device, num_keys, "num_keys");
  }

  const bool ranges = p.window == WindowKind::Ranges;
  const std::string not_ranges =
      fmt::format("the window is {}, not ranges", window_name(p.window));
  if (require_iff("window_start", in.window_start, ranges,
                  "the ranges window reads int32 [rows] start positions", not_ranges.c_str()))
    check_vector("window_start", in.window_start, DType::I32, device, rows, "rows");
  if (require_iff("window_end", in.window_end, ranges,
                  "the ranges window reads int32 [rows] end positions", not_ranges.c_str()))
    check_vector("window_end", in.window_end, DType::I32, device, rows, "rows");

  // Causal: row r at position p = causal_offset + r sees t < (p + 1) / m; the last row's
  // window is the widest.
  if (p.window == WindowKind::Causal && rows > 0) {
    if (causal_offset < 0) fail(fmt::format("causal_offset = {} must be >= 0", causal_offset));
    const int64_t last = rows - 1;
    if (causal_offset > std::numeric_limits<int64_t>::max() - rows)
      fail(fmt::format("window of row {} ends past num_keys {}: causal_offset = {} is too large",
                       last, num_keys, causal_offset));
    const int64_t end = (causal_offset + rows) / p.causal_ratio;
    if (end > window_limit)
      fail(fmt::format("window of row {} ends at {}, past {} {} (causal_offset = {}, "
                       "causal_ratio = {})",
                       last, end, p.sharded() ? "total_keys" : "num_keys", window_limit,
                       causal_offset, p.causal_ratio));
  }

  // Sample hint: int32 [n]. Its values are device data the host never reads: the kernel
  // ignores entries that are no key of the row's window (see TopkInputs::sample_hint).
  if (in.sample_hint.present()) {
    if (p.mode != Mode::TopK) fail("sample_hint given but materialize mode takes no sample");
    check_vector("sample_hint", in.sample_hint, DType::I32, device, in.sample_hint.shape[0],
                 "n");
    if (max_hint_keys >= 0 && in.sample_hint.shape[0] > max_hint_keys)
      fail(fmt::format("sample_hint: shape[0] is {}, the maximum is {} (the smaller of the "
                       "candidate capacity and 2 next_pow2(k))",
                       in.sample_hint.shape[0], max_hint_keys));
  }

  if (p.mode == Mode::TopK) {
    if (!given(out_indices))
      fail(fmt::format("out_indices missing: top-k mode writes int32 [rows, k] = [{}, {}]", rows,
                       p.k));
    check_matrix("out_indices", *out_indices, DType::I32, device, rows, p.k, "k");
    if (given(out_scores))
      check_matrix("out_scores", *out_scores, DType::F32, device, rows, p.k, "k");
  } else {
    if (given(out_indices))
      fail("out_indices given but materialize mode writes only out_scores");
    if (!given(out_scores))
      fail(fmt::format("out_scores missing: materialize mode writes fp32 [rows, num_keys] = "
                       "[{}, {}]",
                       rows, num_keys));
    check_matrix("out_scores", *out_scores, DType::F32, device, rows, num_keys, "num_keys");
  }

  if (required_bytes > 0) {
    if (workspace == nullptr)
      fail(fmt::format("workspace is null, but the plan needs {} bytes", required_bytes));
    if (address(workspace) % 256 != 0)
      fail(fmt::format("workspace pointer {} is not 256-byte aligned", workspace));
    if (workspace_bytes < required_bytes)
      throw WorkspaceTooSmall(fmt::format("workspace of {} bytes is smaller than the {} the plan needs",
                                          workspace_bytes, required_bytes));
  }
  return CallShape{rows, num_keys};
}

}  // namespace winnow::ops
