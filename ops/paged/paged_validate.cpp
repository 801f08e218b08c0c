// Validation of the paged decode op's problem and tensors (ops/paged/paged_topk.h). The score,
// weights and output rules are the fused top-k op's (ops/common/validate.cpp), checked again
// there on the views execute builds.
#include <fmt/format.h>

#include <utility>

#include "ops/common/tensor_rules.h"
#include "ops/common/validate.h"
#include "ops/paged/paged_topk.h"
#include "paged/paged_cache.cuh"

namespace winnow::ops {

void validate_paged_problem(const PagedProblem& p) {
  if (p.next_n < 1 || p.next_n > kMaxNextN)
    fail(fmt::format("next_n = {} is outside [1, {}]", p.next_n, kMaxNextN));
  if (p.max_batch < 1 || p.max_batch > (1 << 20))
    fail(fmt::format("max_batch = {} is outside [1, {}]", p.max_batch, 1 << 20));
  if (p.max_blocks_per_seq < 1 || int64_t(p.max_blocks_per_seq) * kPageKeys > kMaxExtent)
    fail(fmt::format("max_blocks_per_seq = {} is outside [1, {}] (lengths below 2^31)",
                     p.max_blocks_per_seq, kMaxExtent / kPageKeys));
  if (p.max_total_keys < 0 || p.max_total_keys > kMaxExtent)
    fail(fmt::format("max_total_keys = {} is outside [0, {}] (0: max_batch * "
                     "max_blocks_per_seq * 64)",
                     p.max_total_keys, kMaxExtent));
  if (p.max_total_keys == 0 &&
      int64_t(p.max_batch) * p.max_blocks_per_seq * kPageKeys > kMaxExtent)
    fail(fmt::format("max_batch * max_blocks_per_seq * 64 = {} keys is above {}: give "
                     "max_total_keys, the most keys one call's requests hold together",
                     int64_t(p.max_batch) * p.max_blocks_per_seq * kPageKeys, kMaxExtent));
  validate_problem(paged_topk_problem(p));  // k range, heads, score program, arch
}

int64_t validate_paged_call(const PagedProblem& p, int device, const PagedInputs& in,
                            const TensorView* out_indices) {
  const int64_t H = p.heads;
  if (!in.q.present()) fail("q missing: every call needs the queries");
  TensorRules q("q", in.q);
  q.basics(DType::E4M3, device, 4, "[B, next_n, heads, 128]");
  q.dim(1, p.next_n, "next_n");
  q.dim(2, H, "heads");
  q.dim(3, kPageDim, "head_dim");
  q.stride(3, 1, "elements of a head must be contiguous");
  q.stride(2, kPageDim, "heads of a query must be contiguous, stride head_dim");
  q.min_stride(1, H * kPageDim, "heads * head_dim");
  q.stride(0, p.next_n * in.q.strides[1], "queries of a request must follow each other");
  q.vector_rows(1);
  const int64_t B = in.q.shape[0];
  if (B > p.max_batch)
    fail(fmt::format("q: shape[0] is {} requests, above the plan's max_batch {}", B,
                     p.max_batch));

  if (!in.cache.present()) fail("cache missing: every call needs the paged key cache");
  TensorRules c("cache", in.cache);
  c.basics(DType::U8, device, 4, "[num_blocks, 64, 1, 132]");
  c.dim(1, kPageKeys, "block size");
  c.dim(2, 1, "one key head");
  c.dim(3, kPageDim + 4, "128 fp8 bytes + one fp32 scale");
  c.stride(3, 1, "a block must be contiguous");
  c.stride(2, kPageDim + 4, "a block must be contiguous");
  c.stride(1, kPageDim + 4, "a block must be contiguous");
  c.stride(0, kPageBytes, "blocks must be contiguous, 8448 bytes apart");
  c.aligned(16);

  if (!in.block_table.present()) fail("block_table missing: int32 [B, max_blocks_per_seq]");
  TensorRules t("block_table", in.block_table);
  t.basics(DType::I32, device, 2, "[B, max_blocks_per_seq]");
  t.dim(0, B, "B");
  if (in.block_table.shape[1] < p.max_blocks_per_seq)
    fail(fmt::format("block_table: shape[1] is {}, below max_blocks_per_seq {}",
                     in.block_table.shape[1], p.max_blocks_per_seq));
  t.stride(1, 1, "entries of a request must be contiguous");
  t.min_stride(0, in.block_table.shape[1], "shape[1]");

  if (!in.context_lens.present()) fail("context_lens missing: int32 [B] or [B, next_n]");
  TensorRules l("context_lens", in.context_lens);
  if (in.context_lens.ndim == 2) {
    l.basics(DType::I32, device, 2, "[B, next_n]");
    l.dim(1, p.next_n, "next_n");
    l.stride(1, 1, "a request's lengths must be contiguous");
    l.min_stride(0, p.next_n, "next_n");
  } else {
    l.basics(DType::I32, device, 1, "[B] or [B, next_n]");
    l.min_stride(0, 1, "one");
  }
  l.dim(0, B, "B");
  if (!out_indices || !out_indices->present())
    fail(fmt::format("out_indices missing: int32 [B * next_n, k] = [{}, {}]", B * p.next_n, p.k));
  // The output and the hint: rows of k positions.
  for (auto [name, t] : {std::pair{"out_indices", out_indices}, {"hint", &in.hint}}) {
    if (!t->present()) continue;  // the hint is optional
    TensorRules r(name, *t);
    r.basics(DType::I32, device, 2, "[B * next_n, k]");
    r.dim(0, B * p.next_n, "B * next_n");
    r.dim(1, p.k, "k");
    r.stride(1, 1, "elements of a row must be contiguous");
    r.min_stride(0, p.k, "k");
  }
  return B;
}

}  // namespace winnow::ops
