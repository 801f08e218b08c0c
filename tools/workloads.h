// The workloads of docs/performance.md that `winnow bench` times and `winnow tune` tunes:
// one table, so both mean the same problem by the same name.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compiler/backend/arch.h"
#include "compiler/ir/ir.h"
#include "ops/common/topk_op.h"
#include "ops/common/tensor.h"

namespace winnow::tools {

// How a workload's size maps to rows and keys, and which record parameters it reports.
enum class Family {
  Dsa,  // size = T keys, Q rows (--Q)
  Csa,  // size = S positions: S rows, T = S / m keys, position p sees t < (p + 1) / m
  Knn,  // size = N keys, batch rows (--Q); floor: reading the corpus once
};

struct Workload {
  const char* name;
  Family family;
  ir::Expr (*score)(ops::DType);
  int heads, head_dim;
  int causal_ratio;  // 0: dense; dsa: 1, the chunk is the last Q positions; csa: m
  std::vector<int64_t> sizes;
  std::vector<int64_t> ks;
  int64_t queries;  // rows per size (dsa, knn)
  ops::DType dtype;
  std::vector<ops::DType> dtypes;  // those --q-dtype accepts
};

// The workload's problem without its k and window (tools/cmd_bench.cpp sizes it per run).
ops::TopkProblem workload_problem(const Workload& w, ops::DType t, int head_dim,
                                  const backend::Arch& arch);
// Rows and keys of one size: dsa and knn have `queries` rows of `size` keys; csa has `size`
// positions (every one a row) over size / m keys.
struct RowsKeys {
  int64_t rows = 0, keys = 0;
};
RowsKeys workload_rows_keys(const Workload& w, int64_t size, int64_t queries);

// Every workload but block-select (tools/cmd_bench_block.cpp), in the order of the help.
std::span<const Workload> workloads();
// The workload of that name; nullptr when there is none.
const Workload* workload_named(const std::string& name);

}  // namespace winnow::tools
