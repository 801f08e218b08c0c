// The shard merge op: R ranks each ran the fused top-k over their shard of the
// keys (TopkProblem::shard_key_offset / total_keys: global indices); this merges their
// per-row lists of k (index, score) into the top-k over every key, on the GPU, equal to
// one GPU's result bit for bit. One call: pack this rank's lists into RankKeys
// (templates/shard/shard_merge.cuh), all-gather them (the caller's callback or NCCL), merge
// every row. Execute never allocates, synchronises or compiles: the workspace, sized at
// plan time for max_rows, holds the counters, the send buffer and the gathered lists.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "ops/common/tensor.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

inline constexpr int kMaxShardRanks = 1024;

struct ShardMergeProblem {
  int ranks = 2;         // R: lists merged per row
  int k = 2048;          // entries per row in each rank's list and in the result
  int64_t max_rows = 0;  // rows per call at most (sizes the workspace)
  bool sorted = false;   // result order: by score, else ascending by index (as TopkOp)
  backend::Arch arch;
};

// The all-gather: copies `bytes` from `send` (this rank's) to recv + r * bytes on every rank
// r, enqueued on `stream` (no host synchronisation). Throws to fail the call.
using AllGather = std::function<void(const void* send, void* recv, size_t bytes, CUstream)>;

class ShardMergeOp {
 public:
  // Validates (ranks in 1..kMaxShardRanks, k in 1..kMaxK, max_rows >= 1, the workspace
  // below 2^40 bytes, the arch) and generates the kernels' source. ctx may be null.
  static std::unique_ptr<ShardMergeOp> create(const ShardMergeProblem& p, const rt::Context* ctx);
  ~ShardMergeOp();

  const ShardMergeProblem& problem() const;
  const std::string& source() const;
  backend::CompileRequest compile_request() const;
  void build(rt::CubinCache& cache, const backend::Backend& be);
  bool built() const;
  const std::vector<char>& cubin() const;
  // Bytes for max_rows: 256 (counters) + max_rows k 8 (send) + ranks max_rows k 8
  // (gathered). Known without a device.
  size_t workspace_bytes() const;
  size_t counter_offset() const;  // two uint32: rows with a repeated key, malformed entries

  // local_indices int32 and local_scores fp32: [rows, k] (this rank's, with `gather`), or
  // [ranks, rows, k] (every rank's lists in this process, gather null: loopback). out_indices
  // int32 [rows, k], out_scores fp32 [rows, k] or absent.
  void execute(const TensorView& local_indices, const TensorView& local_scores,
               const AllGather* gather, const TensorView& out_indices,
               const TensorView* out_scores, void* workspace, size_t workspace_bytes,
               CUstream stream) const;

 private:
  struct Impl;
  explicit ShardMergeOp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The all-gather over an ncclComm_t (NCCL loaded now if it was not: rt::NcclMissing, as
// NotSupported, when it cannot be), checking that the communicator has `ranks` ranks.
AllGather nccl_all_gather(void* comm, int ranks);

}  // namespace winnow::ops
