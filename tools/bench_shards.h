// `winnow bench <workload> --shards N`: the keys split over N GPUs of this
// machine, each GPU running the fused top-k over its shard (global indices), the lists
// merged exactly through NCCL (one communicator per GPU, ncclCommInitAll, one host thread
// per GPU), against one GPU over all the keys in the same run: both timed the same way
// (host wall time of a call with its stream synchronised), the merged result checked
// against the one-GPU result bit for bit on every row.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/common/tensor.h"
#include "tools/workloads.h"

namespace winnow::tools {

struct ShardBenchArgs {
  const Workload* workload = nullptr;  // knn-ip or dsa-prefill
  std::vector<int64_t> sizes, ks;
  int64_t queries = 0;
  int head_dim = 0;
  ops::DType dtype = ops::DType::F16;
  int shards = 2;
  int repeats = 10, warmup = 2;
  uint64_t seed = 1;
  std::string out_path;
};

// Runs every (size, k); 0 when every merged result equals the one-GPU result, 1 otherwise
// or when there are fewer GPUs than shards or NCCL cannot be loaded (said on stderr).
int run_bench_shards(const ShardBenchArgs& a);

}  // namespace winnow::tools
