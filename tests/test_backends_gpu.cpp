// NVRTC and LLVM compile the same semantics: with contraction off on both (--fmad=false,
// -ffp-contract=off) the materialized fp32 scores are bit-identical on the same inputs, and
// under the LLVM backend's own cubins fused == materialize + exact select still holds.
// The LLVM kernels are built (sm_90a, through the kernel cache, WINNOW_CACHE_DIR when set)
// before the GPU check: without a GPU the test compiles them and is reported as skipped,
// and a cache filled that way serves a GPU machine that has no LLVM (bench/NOTES.md).
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "runtime/disk_store.h"
#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "support.h"
#include "topk_check.h"

using namespace winnow;

namespace {

std::optional<rt::DiskStore> test_disk() {
  if (rt::env_get("WINNOW_DISABLE_DISK_CACHE").value_or("") == "1") return std::nullopt;
  if (!rt::env_get("WINNOW_CACHE_DIR")) return std::nullopt;  // only a folder named for it
  return rt::DiskStore(rt::default_cache_dir());
}

struct BackendOps {
  std::unique_ptr<backend::Backend> be;
  rt::CubinCache cache{test_disk()};
  explicit BackendOps(const char* name) : be(backend::make_backend(name)) {}
  // ctx null: compiled only.
  std::unique_ptr<ops::TopkOp> build(ops::TopkProblem p, const rt::Context* ctx) {
    p.arch = backend::parse_arch("sm_90a");  // the llvm backend's one target
    auto op = ops::TopkOp::create(p, ctx);
    op->build(cache, *be);
    return op;
  }
};

}  // namespace

TEST_CASE("nvrtc and llvm backends: materialized fp32 scores equal bit for bit", "[gpu][llvm]") {
  INFO("seed " << test::test_seed());
#ifndef WINNOW_LLVM_BUILT
  WARN("WINNOW_SKIP: this build has no llvm backend (WINNOW_LLVM=OFF or LLVM 19 not found)");
  return;
#endif
  static BackendOps llvm("llvm");
  const int pick = GENERATE(0, 1, 2, 3, 4, 5);
  ops::TopkProblem p;
  const char* what = "";
  switch (pick) {
    case 0: p = test::relu_mh_problem(64, 64, ops::DType::E4M3), what = "relu_mh fp8"; break;
    case 1: p = test::single_head(ir::ip(), 128, 50, ops::DType::BF16), what = "ip"; break;
    case 2: p = test::single_head(ir::l2(), 128, 50, ops::DType::BF16), what = "l2"; break;
    case 3: p = test::single_head(ir::cosine(), 128, 50, ops::DType::BF16), what = "cosine"; break;
    case 4:
      p = test::relu_mh_problem(16, 40, ops::DType::BF16);
      p.score = ir::parse(what = "max_h(dot(h))");
      break;
    default:
      p = test::relu_mh_problem(16, 40, ops::DType::BF16);
      p.score = ir::parse(what = "sum_h(w[h] * softplus(dot(h))) * kscale");
      break;
  }
  INFO(what);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  const bool gpu = rt::gpu_available();
  const rt::Context* ctx = gpu ? test::GpuFixture::get().ctx.get() : nullptr;
  // A GPU machine without LLVM's libraries runs this test only from a cache filled where
  // they are (bench/NOTES.md); where the build found LLVM (CI, no GPU) a load failure fails.
  // Both builds are tried before giving up, so that a recorded run (WINNOW_RECORD_COMPILES)
  // holds both requests: session 30's replay lacked the fused kernels of the picks whose
  // materialize build had failed first.
  std::string missing;
  auto build_llvm = [&](const ops::TopkProblem& q) -> std::unique_ptr<ops::TopkOp> {
    try {
      return llvm.build(q, ctx);
    } catch (const backend::CompileError& e) {
      if (!gpu || std::string(e.what()).rfind("the llvm backend cannot be loaded", 0) != 0) throw;
      if (missing.empty()) missing = e.what();
      return nullptr;
    }
  };
  std::unique_ptr<ops::TopkOp> llvm_mat = build_llvm(pm), llvm_fused = build_llvm(p);
  if (!missing.empty()) {
    WARN("WINNOW_SKIP: this machine cannot load the llvm backend and WINNOW_CACHE_DIR holds "
         "no llvm cubin for this problem: " << missing);
    return;
  }
  WINNOW_REQUIRE_GPU();
  if (ops::device_arch(*ctx) != backend::parse_arch("sm_90a")) {
    WARN("WINNOW_SKIP: the llvm backend's cubins are sm_90a; this GPU is not");
    return;
  }
  static BackendOps nvrtc("nvrtc");
  auto nvrtc_mat = nvrtc.build(pm, ctx);
  std::mt19937_64 rng(test::test_seed() ^ uint64_t(pick));
  const ops::ProblemData d = ops::random_problem(p, 20, 3000, rng);
  const ops::RunResult a = ops::run_on_device(*nvrtc_mat, *ctx, d);
  const ops::RunResult b = ops::run_on_device(*llvm_mat, *ctx, d);
  REQUIRE(a.scores.size() == b.scores.size());
  size_t differ = 0, first = a.scores.size();
  for (size_t i = 0; i < a.scores.size(); ++i) {
    if (std::memcmp(&a.scores[i], &b.scores[i], sizeof(float)) != 0) {
      if (differ++ == 0) first = i;
    }
  }
  std::string first_difference;
  if (differ > 0)
    first_difference = "first difference at " + std::to_string(first) + ": nvrtc " +
                       std::to_string(a.scores[first]) + " llvm " + std::to_string(b.scores[first]);
  INFO(differ << " scores differ; " << first_difference);
  CHECK(differ == 0);
  // Fused == materialize + exact select under the LLVM backend's own cubins.
  const ops::RunResult fused = ops::run_on_device(*llvm_fused, *ctx, d);
  test::check_against_materialize(p, d, fused, b);
}
