// NVRTC and LLVM compile the same semantics: with contraction off on both (--fmad=false,
// -ffp-contract=off) the materialized fp32 scores are bit-identical on the same inputs, and
// under the LLVM backend's own cubins fused == materialize + exact select still holds.
#include <cstring>
#include <memory>
#include <random>

#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "runtime/kernel_cache.h"
#include "support.h"
#include "topk_check.h"

using namespace winnow;

namespace {

struct BackendOps {
  std::unique_ptr<backend::Backend> be;
  rt::CubinCache cache{std::nullopt};
  explicit BackendOps(const char* name) : be(backend::make_backend(name)) {}
  std::unique_ptr<ops::TopkOp> build(ops::TopkProblem p, const rt::Context& ctx) {
    p.arch = ops::device_arch(ctx);
    auto op = ops::TopkOp::create(p, &ctx);
    op->build(cache, *be);
    return op;
  }
};

}  // namespace

TEST_CASE("nvrtc and llvm backends: materialized fp32 scores equal bit for bit", "[gpu][llvm]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = test::GpuFixture::get();
  static BackendOps nvrtc("nvrtc"), llvm("llvm");
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
  std::mt19937_64 rng(test::test_seed() ^ uint64_t(pick));
  const ops::ProblemData d = ops::random_problem(p, 20, 3000, rng);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  const ops::RunResult a = ops::run_on_device(*nvrtc.build(pm, *f.ctx), *f.ctx, d);
  const ops::RunResult b = ops::run_on_device(*llvm.build(pm, *f.ctx), *f.ctx, d);
  REQUIRE(a.scores.size() == b.scores.size());
  size_t differ = 0, first = a.scores.size();
  for (size_t i = 0; i < a.scores.size(); ++i) {
    if (std::memcmp(&a.scores[i], &b.scores[i], sizeof(float)) != 0) {
      if (differ++ == 0) first = i;
    }
  }
  INFO("first difference at " << first << ": nvrtc " << (first < a.scores.size() ? a.scores[first] : 0.f)
                              << " llvm " << (first < b.scores.size() ? b.scores[first] : 0.f));
  CHECK(differ == 0);
  // Fused == materialize + exact select under the LLVM backend's own cubins.
  const ops::RunResult fused = ops::run_on_device(*llvm.build(p, *f.ctx), *f.ctx, d);
  test::check_against_materialize(p, d, fused, b);
}
