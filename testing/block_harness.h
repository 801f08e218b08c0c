// Runs block-select and block-sparse attention on host data: upload, execute, download.
// Used by the [gpu] tests and `winnow bench block-select` (never by execute itself).
#pragma once
#include <vector>

#include "ops/block/block_attention.h"
#include "testing/block_data.h"
#include "testing/block_reference.h"
#include "ops/block/block_select.h"

namespace winnow::ops {

// q, k, v on the device.
struct BlockDeviceInputs {
  int64_t seq_len = 0;
  rt::DeviceBuffer q, k, v;
  TensorView q_view(const BlockProblem& p) const;
  TensorView k_view(const BlockProblem& p) const;
  TensorView v_view(const BlockProblem& p) const;
};
BlockDeviceInputs upload_block_inputs(const BlockData& d);

// The CSR index (capacity: every visible block), optional block scores, the workspace.
struct BlockIndexBuffers {
  int64_t seq_len = 0;
  rt::DeviceBuffer offsets, indices, scores, workspace;
  TensorView offsets_view(const BlockProblem& p) const;
  TensorView indices_view(const BlockProblem& p) const;
  TensorView scores_view(const BlockProblem& p) const;  // absent when not allocated
};
BlockIndexBuffers make_index_buffers(const BlockSelectOp& op, int64_t seq_len, bool with_scores);

void execute_block_select(const BlockSelectOp& op, const BlockDeviceInputs& in,
                          const BlockSelectRule& rule, const BlockIndexBuffers& out,
                          CUstream stream);
BlockIndex download_index(const BlockProblem& p, const BlockIndexBuffers& b);
std::vector<float> download_block_scores(const BlockProblem& p, const BlockIndexBuffers& b);

// out [L, heads, d] bf16 on the device.
rt::DeviceBuffer make_attention_output(const BlockProblem& p, int64_t seq_len);
void execute_block_attention(const BlockAttentionOp& op, const BlockDeviceInputs& in,
                             const BlockIndexBuffers& index, const rt::DeviceBuffer& out,
                             CUstream stream);
// The output decoded to fp32.
std::vector<float> download_attention(const BlockProblem& p, int64_t seq_len,
                                      const rt::DeviceBuffer& out);

}  // namespace winnow::ops
