#include "ops/block/block_problem.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

#include "ops/common/tensor_rules.h"

namespace winnow::ops {

void validate_block_problem(const BlockProblem& p, const char* op) {
  if (!backend::is_supported(p.arch))
    throw NotSupported(fmt::format("arch {} is not supported: {} supports {}", p.arch.str(), op,
                                   backend::supported_archs()));
  if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads != 0)
    fail(fmt::format("heads = {} must be a positive multiple of kv_heads = {}", p.heads,
                     p.kv_heads));
  if (p.head_dim != 64 && p.head_dim != 128)
    throw NotSupported(fmt::format("head_dim = {} is not supported: {} takes 64 or 128",
                                   p.head_dim, op));
  if (p.max_seq_len < kBlockSize || p.max_seq_len % kBlockSize != 0)
    fail(fmt::format("max_seq_len = {} must be a positive multiple of the block size {}",
                     p.max_seq_len, kBlockSize));
  // The CSR offsets are int32: the index of the longest sequence must fit in them. 65536
  // blocks alone hold more than 2^31 - 1 pairs, so the product below cannot overflow.
  constexpr int64_t kMaxEntries = std::numeric_limits<int32_t>::max();
  const int64_t nb = block_count(p.max_seq_len);
  if (nb >= 65536 || index_capacity(p, p.max_seq_len) > kMaxEntries)
    fail(fmt::format("max_seq_len = {} with heads = {} needs a CSR index of heads * nb (nb + 1) "
                     "/ 2 = {} entries (nb = {}), more than the int32 offsets hold ({})",
                     p.max_seq_len, p.heads,
                     nb >= 65536 ? std::string("over 2^31") : std::to_string(index_capacity(p, p.max_seq_len)),
                     nb, kMaxEntries));
}

void validate_seq_len(const BlockProblem& p, int64_t seq_len, const char* name) {
  if (seq_len < kBlockSize || seq_len % kBlockSize != 0)
    throw NotSupported(fmt::format("{} = {} is not a positive multiple of the block size {}",
                                   name, seq_len, kBlockSize));
  if (seq_len > p.max_seq_len)
    fail(fmt::format("{} = {} exceeds the problem's max_seq_len = {}", name, seq_len,
                     p.max_seq_len));
}

void validate_block_rule(const BlockSelectRule& r) {
  if (!(r.alpha >= 0.0f && r.alpha <= 1.0f))
    fail(fmt::format("alpha = {} is outside [0, 1]", r.alpha));
  if (r.sink_blocks < 0 || r.last_blocks < 0 || r.min_blocks < 0)
    fail(fmt::format("sink_blocks = {}, last_blocks = {} and min_blocks = {} must be >= 0",
                     r.sink_blocks, r.last_blocks, r.min_blocks));
  if (r.local_blocks < 1)
    fail(fmt::format("local_blocks = {} must be >= 1 (the diagonal block is always kept)",
                     r.local_blocks));
}

namespace {

void check_tokens(const char* name, const TensorView& t, int device, int64_t seq_len, int heads,
                  int dim) {
  TensorRules r(name, t);
  r.basics(DType::BF16, device, 3, "[L, heads, head_dim]");
  if (seq_len >= 0) r.dim(0, seq_len, "L (q's shape[0])");
  r.dim(1, heads, "heads");
  r.dim(2, dim, "head_dim");
  r.stride(2, 1, "elements of a head must be contiguous");
  r.stride(1, dim, "heads of a token must be contiguous");
  r.stride(0, int64_t(heads) * dim, "tokens must be contiguous");
  r.aligned(16);
}

}  // namespace

int64_t validate_block_inputs(const BlockProblem& p, int device, const TensorView& q,
                              const TensorView& k, const TensorView* v) {
  check_tokens("q", q, device, -1, p.heads, p.head_dim);
  const int64_t L = q.shape[0];
  validate_seq_len(p, L, "q: L");
  check_tokens("k", k, device, L, p.kv_heads, p.head_dim);
  if (v) check_tokens("v", *v, device, L, p.kv_heads, p.head_dim);
  return L;
}

void validate_block_index(const BlockProblem& p, int device, int64_t seq_len,
                          const TensorView& offsets, const TensorView& indices) {
  const int64_t rows = int64_t(p.heads) * block_count(seq_len);
  check_vector("offsets", offsets, DType::I32, device, rows + 1, "heads * blocks + 1");
  TensorRules r("indices", indices);
  r.basics(DType::I32, device, 1, "[capacity]");
  r.stride(0, 1, "must be contiguous");
  const int64_t need = index_capacity(p, seq_len);
  if (indices.shape[0] < need)
    fail(fmt::format("indices: shape[0] is {}, below the capacity heads * nb (nb + 1) / 2 = {}",
                     indices.shape[0], need));
}

plan::BlockSpec block_spec(const BlockProblem& p) {
  plan::BlockSpec s;
  s.heads = p.heads;
  s.kv_heads = p.kv_heads;
  s.head_dim = p.head_dim;
  s.max_blocks = int(block_count(p.max_seq_len));
  return s;
}

plan::BlockPlan block_plan(const plan::BlockSpec& s, long smem_limit) {
  plan::BlockPlan out;
  std::string why;
  if (!plan::choose_block_plan(s, smem_limit, &out, &why)) throw NotSupported(why);
  return out;
}

}  // namespace winnow::ops
