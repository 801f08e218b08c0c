#include "tools/workloads.h"

namespace winnow::tools {
namespace {

using ops::DType;

ir::Expr scaled_relu_mh(ops::DType) { return ir::relu_mh(true); }
// bf16 keys need no scale; fp8 keys come with their per-key scale.
ir::Expr csa_score(ops::DType t) { return ir::relu_mh(t == ops::DType::E4M3); }
ir::Expr ip_score(ops::DType) { return ir::ip(); }
ir::Expr l2_score(ops::DType) { return ir::l2(); }
ir::Expr cosine_score(ops::DType) { return ir::cosine(); }

const std::vector<DType> kTensorCoreTypes = {DType::E4M3, DType::BF16};
const std::vector<DType> kAllTypes = {DType::F16, DType::BF16, DType::F32, DType::E4M3};
const std::vector<int64_t> kDsaSizes = {65536, 262144, 1048576};
const std::vector<int64_t> kKnnKs = {128, 1024, 4096, 8192};
const std::vector<int64_t> kCsaSizes = {32768, 65536, 131072, 262144, 524288, 1048576};
const Workload kWorkloads[] = {
    {"dsa-prefill", Family::Dsa, scaled_relu_mh, 64, 128, 0, kDsaSizes, {2048}, 8192,
     DType::E4M3, kTensorCoreTypes},
    {"dsa-prefill-causal", Family::Dsa, scaled_relu_mh, 64, 128, 1, kDsaSizes, {2048}, 8192,
     DType::E4M3, kTensorCoreTypes},
    {"dsa-glm", Family::Dsa, scaled_relu_mh, 32, 128, 0, kDsaSizes, {2048}, 8192, DType::E4M3,
     kTensorCoreTypes},
    {"csa-1m", Family::Csa, csa_score, 64, 128, 4, kCsaSizes, {512, 1024}, 0, DType::BF16,
     kTensorCoreTypes},
    {"knn-ip", Family::Knn, ip_score, 1, 768, 0, {1048576}, kKnnKs, 64, DType::F16, kAllTypes},
    {"knn-l2", Family::Knn, l2_score, 1, 768, 0, {1048576}, kKnnKs, 64, DType::F16, kAllTypes},
    {"knn-cosine", Family::Knn, cosine_score, 1, 768, 0, {1048576}, kKnnKs, 64, DType::F16,
     kAllTypes},
};

}  // namespace

ops::TopkProblem workload_problem(const Workload& w, ops::DType t, int head_dim,
                                  const backend::Arch& arch) {
  ops::TopkProblem p;
  p.score = w.score(t);
  p.heads = w.heads;
  p.head_dim = head_dim;
  p.q_dtype = t;
  p.k_dtype = t;
  p.arch = arch;
  return p;
}

RowsKeys workload_rows_keys(const Workload& w, int64_t size, int64_t queries) {
  const bool csa = w.family == Family::Csa;
  return {csa ? size : queries, csa ? size / w.causal_ratio : size};
}

std::span<const Workload> workloads() { return kWorkloads; }

const Workload* workload_named(const std::string& name) {
  for (const Workload& w : kWorkloads)
    if (name == w.name) return &w;
  return nullptr;
}

}  // namespace winnow::tools
