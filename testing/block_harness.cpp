#include "testing/block_harness.h"

#include <algorithm>


namespace winnow::ops {
namespace {

rt::DeviceBuffer upload_codes(const std::vector<uint16_t>& v) {
  rt::DeviceBuffer b(std::max<size_t>(v.size() * 2, 16));
  b.upload(v.data(), v.size() * 2);
  return b;
}

}  // namespace

TensorView BlockDeviceInputs::q_view(const BlockProblem& p) const {
  return contiguous_view(q.data(), DType::BF16, {seq_len, p.heads, p.head_dim});
}
TensorView BlockDeviceInputs::k_view(const BlockProblem& p) const {
  return contiguous_view(k.data(), DType::BF16, {seq_len, p.kv_heads, p.head_dim});
}
TensorView BlockDeviceInputs::v_view(const BlockProblem& p) const {
  return contiguous_view(v.data(), DType::BF16, {seq_len, p.kv_heads, p.head_dim});
}

BlockDeviceInputs upload_block_inputs(const BlockData& d) {
  BlockDeviceInputs in;
  in.seq_len = d.seq_len;
  in.q = upload_codes(d.q);
  in.k = upload_codes(d.k);
  in.v = upload_codes(d.v);
  return in;
}

TensorView BlockIndexBuffers::offsets_view(const BlockProblem& p) const {
  return contiguous_view(offsets.data(), DType::I32, {p.heads * block_count(seq_len) + 1});
}
TensorView BlockIndexBuffers::indices_view(const BlockProblem& p) const {
  return contiguous_view(indices.data(), DType::I32, {index_capacity(p, seq_len)});
}
TensorView BlockIndexBuffers::scores_view(const BlockProblem& p) const {
  if (scores.size() == 0) return {};
  return contiguous_view(scores.data(), DType::F32, {index_capacity(p, seq_len)});
}

BlockIndexBuffers make_index_buffers(const BlockSelectOp& op, int64_t seq_len, bool with_scores) {
  const BlockProblem& p = op.problem();
  BlockIndexBuffers b;
  b.seq_len = seq_len;
  const size_t capacity = size_t(index_capacity(p, seq_len));
  b.offsets = rt::DeviceBuffer(size_t(p.heads * block_count(seq_len) + 1) * 4);
  b.indices = rt::DeviceBuffer(capacity * 4);
  if (with_scores) b.scores = rt::DeviceBuffer(capacity * 4);
  b.workspace = rt::DeviceBuffer(op.workspace_bytes(seq_len));
  return b;
}

void execute_block_select(const BlockSelectOp& op, const BlockDeviceInputs& in,
                          const BlockSelectRule& rule, const BlockIndexBuffers& out,
                          CUstream stream) {
  const BlockProblem& p = op.problem();
  const TensorView scores = out.scores_view(p);
  op.execute(in.q_view(p), in.k_view(p), rule, out.offsets_view(p), out.indices_view(p),
             scores.present() ? &scores : nullptr, out.workspace.data(), out.workspace.size(),
             stream);
}

BlockIndex download_index(const BlockProblem& p, const BlockIndexBuffers& b) {
  BlockIndex index;
  index.offsets.resize(size_t(p.heads * block_count(b.seq_len) + 1));
  b.offsets.download(index.offsets.data(), index.offsets.size() * 4);
  index.indices.resize(size_t(index.offsets.back()));
  if (!index.indices.empty()) b.indices.download(index.indices.data(), index.indices.size() * 4);
  return index;
}

std::vector<float> download_block_scores(const BlockProblem& p, const BlockIndexBuffers& b) {
  std::vector<float> s(size_t(index_capacity(p, b.seq_len)));
  b.scores.download(s.data(), s.size() * 4);
  return s;
}

rt::DeviceBuffer make_attention_output(const BlockProblem& p, int64_t seq_len) {
  return rt::DeviceBuffer(size_t(seq_len) * p.heads * p.head_dim * 2);
}

void execute_block_attention(const BlockAttentionOp& op, const BlockDeviceInputs& in,
                             const BlockIndexBuffers& index, const rt::DeviceBuffer& out,
                             CUstream stream) {
  const BlockProblem& p = op.problem();
  op.execute(in.q_view(p), in.k_view(p), in.v_view(p), index.offsets_view(p),
             index.indices_view(p),
             contiguous_view(out.data(), DType::BF16, {in.seq_len, p.heads, p.head_dim}), stream);
}

std::vector<float> download_attention(const BlockProblem& p, int64_t seq_len,
                                      const rt::DeviceBuffer& out) {
  std::vector<uint16_t> codes(size_t(seq_len) * p.heads * p.head_dim);
  out.download(codes.data(), codes.size() * 2);
  return decode_bf16_codes(codes);
}

}  // namespace winnow::ops
