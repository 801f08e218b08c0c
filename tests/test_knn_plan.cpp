// The retrieval mode on the CPU: which problems take it, its plan, workspace and sample
// arithmetic (templates/knn/knn_workspace.cuh), and its kernels compiled for sm_90a by NVRTC
// (registers and spills from ptxas).
#include <cmath>

#include "compiler/backend/backend.h"
#include "ops/common/errors.h"
#include "ops/common/topk_op.h"
#include "ptx_entries.h"
#include "ptxas_log.h"
#include "support.h"
#include "topk_check.h"
#include "knn/knn_workspace.cuh"

using namespace winnow;

namespace {

ops::TopkProblem knn_problem(ir::Expr score, int dim, int k, ops::DType t) {
  ops::TopkProblem p = test::single_head(std::move(score), dim, k, t);
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

}  // namespace

TEST_CASE("the op takes the retrieval mode only for one-head dense fp16/bf16 on sm_90a",
          "[knn][codegen]") {
  {
    // The default: without WINNOW_KNN_RETRIEVAL the problem takes the retrieval mode.
    test::ScopedEnv unset("WINNOW_KNN_RETRIEVAL", nullptr);
    CHECK(ops::TopkOp::create(knn_problem(ir::ip(), 768, 128, ops::DType::F16), nullptr)
              ->retrieval_mode());
  }
  {
    // Any other value than 0 or 1 is refused, not read as either.
    test::ScopedEnv bad("WINNOW_KNN_RETRIEVAL", "yes");
    CHECK_THROWS_WITH(ops::TopkOp::create(knn_problem(ir::ip(), 768, 128, ops::DType::F16), nullptr),
                      Catch::Contains("WINNOW_KNN_RETRIEVAL is 'yes': expected 0 or 1"));
  }
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  CHECK(ops::TopkOp::create(knn_problem(ir::ip(), 768, 128, ops::DType::F16), nullptr)
            ->retrieval_mode());
  CHECK(ops::TopkOp::create(knn_problem(ir::l2(), 1024, 8192, ops::DType::BF16), nullptr)
            ->retrieval_mode());
  CHECK(ops::TopkOp::create(knn_problem(ir::cosine(), 64, 1, ops::DType::F16), nullptr)
            ->retrieval_mode());
  auto p = knn_problem(ir::ip(), 96, 128, ops::DType::F16);  // d not a multiple of 64
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  p = knn_problem(ir::ip(), 768, 128, ops::DType::F32);
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  p = knn_problem(ir::ip(), 768, 128, ops::DType::E4M3);
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  p = knn_problem(ir::ip(), 768, 128, ops::DType::F16);
  p.window = ops::WindowKind::Causal;
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  p = knn_problem(ir::ip(), 768, 128, ops::DType::F16);
  p.arch = backend::parse_arch("sm_100a");
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  p = knn_problem(ir::relu_mh(true), 128, 2048, ops::DType::BF16);
  p.heads = 64;
  CHECK_FALSE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  {
    test::ScopedEnv off("WINNOW_KNN_RETRIEVAL", "0");
    CHECK_FALSE(ops::TopkOp::create(knn_problem(ir::ip(), 768, 128, ops::DType::F16), nullptr)
                    ->retrieval_mode());
  }
  auto op = ops::TopkOp::create(knn_problem(ir::ip(), 768, 1024, ops::DType::F16), nullptr);
  CHECK_THAT(op->plan_text(), Catch::Contains("knn dim=768 elem=fp16 topk=1024"));
  CHECK_THAT(op->source(), Catch::Contains("winnow_knn_select"));
}

TEST_CASE("retrieval workspace within batch x 4 max(k, 1024) x 8 bytes + 16 MB at batch 64",
          "[knn][codegen]") {
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  for (int k : {1, 128, 1024, 4096, 8192}) {
    INFO("k " << k);
    const int cap = knn_capacity(k);
    CHECK(cap == 4 * std::max(k, 1024));
    const KnnWorkspace w{cap, kKnnMaxSampleCap};
    CHECK(w.bytes() <= 64LL * 4 * std::max(k, 1024) * 8 + (16LL << 20));
    CHECK(w.lists_offset() % 256 == 0);
    CHECK(w.samples_offset() == w.lists_offset() + 64LL * cap * 8);
  }
  // The stream kernel fits 227 KB at every d, with at least two ring stages.
  for (int d = 64; d <= 1024; d += 64) {
    CHECK(KnnStreamSmem{d * 2, 2}.bytes() <= 227 * 1024);
  }
  CHECK(KnnStreamSmem{768 * 2, 2}.ring_off() % 1024 == 0);
}

TEST_CASE("the sample: a strided tile subset whose rank-th best leaves k..capacity survivors",
          "[knn][codegen]") {
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  for (long long n : {4096LL, 4097LL, 20011LL, 1048576LL, 5000000LL, 5242880LL}) {
    for (int k : {1, 128, 1024, 8192}) {
      INFO("N " << n << " k " << k);
      const int cap = knn_capacity(k);
      const KnnSample s = knn_sample(n, k, cap, kKnnMaxSampleCap);
      if (n <= cap) {
        CHECK(s.tiles == 0);  // the whole corpus fits the list: threshold 0
        continue;
      }
      const long long key_tiles = (n + kKnnKeyTile - 1) / kKnnKeyTile;
      REQUIRE(s.tiles >= 1);
      CHECK(int64_t(s.tiles) * kKnnKeyTile <= kKnnMaxSampleCap);
      CHECK(int64_t(s.tiles - 1) * s.stride < key_tiles);  // every sample tile exists
      // Real keys among the sample tiles, counted the slow way.
      long long valid = 0;
      for (int j = 0; j < s.tiles; ++j) {
        const long long first = int64_t(j) * s.stride * kKnnKeyTile;
        valid += std::min<long long>(kKnnKeyTile, n - first);
      }
      CHECK(s.valid == valid);
      CHECK(s.rank >= 1);
      CHECK(s.rank <= s.valid);
      // Expected survivors N rank / valid: between k and the capacity, with room.
      const double expect = double(n) * s.rank / s.valid;
      CHECK(expect >= 1.5 * k);
      CHECK(expect <= 0.75 * cap);
    }
  }
}

TEST_CASE("the retrieval kernels compile for sm_90a: wgmma m64n64, TMA, no spills",
          "[knn][nvrtc]") {
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  auto be = backend::make_nvrtc_backend();
  struct Case {
    ir::Expr score;
    ops::DType t;
    int dim, k;
    ops::Mode mode;
    bool sorted;
  };
  const std::vector<Case> cases = {
      {ir::ip(), ops::DType::F16, 768, 128, ops::Mode::TopK, false},
      {ir::l2(), ops::DType::BF16, 768, 8192, ops::Mode::TopK, true},
      {ir::cosine(), ops::DType::F16, 1024, 1024, ops::Mode::TopK, false},
      {ir::l2(), ops::DType::F16, 768, 1, ops::Mode::Materialize, false},
  };
  for (const Case& c : cases) {
    auto p = knn_problem(c.score, c.dim, c.k, c.t);
    p.mode = c.mode;
    p.sorted = c.sorted;
    auto op = ops::TopkOp::create(p, nullptr);
    INFO(op->plan_text());
    REQUIRE(op->retrieval_mode());
    backend::CompileRequest req = op->compile_request();
    req.options.push_back("--ptxas-options=-v");
    const backend::CompileResult r = be->compile(req, /*emit_ptx=*/true);
    CHECK(r.cubin.size() > 1000);
    const char* mma = c.t == ops::DType::F16 ? "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
                                             : "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16";
    CHECK(r.ptx.find(mma) != std::string::npos);
    CHECK(r.ptx.find("cp.async.bulk.tensor.2d") != std::string::npos);
    CHECK(r.ptx.find("mbarrier.try_wait.parity") != std::string::npos);
    // Every kernel lets the next launch start first thing (grid_dependency_trigger).
    for (const char* entry : {"winnow_knn_stream", "winnow_knn_threshold", "winnow_knn_select"}) {
      INFO(entry);
      const std::string text = test::ptx_entry_text(r.ptx, entry);
      CHECK(!text.empty());
      CHECK(text.find("griddepcontrol.launch_dependents") != std::string::npos);
    }
    // ptxas -v: every entry's spill stores and loads (none allowed beyond a few bytes).
    INFO(r.log);
    const std::vector<test::PtxasSpills> spills = test::ptxas_spills(r.log);
    for (const test::PtxasSpills& e : spills) {
      CHECK(e.stores <= 16);
      CHECK(e.loads <= 16);
    }
    CHECK(spills.size() >= 3);
  }
}

// The barrier wait's report (WINNOW_KNN_WAIT_REPORT=1): a printf before the trap only when
// asked, through the options either backend takes.
TEST_CASE("the retrieval kernel reports a barrier wait it gives up on only when asked",
          "[knn][nvrtc]") {
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  auto p = knn_problem(ir::ip(), 128, 128, ops::DType::F16);
  auto op = ops::TopkOp::create(p, nullptr);
  REQUIRE(op->retrieval_mode());
  auto be = backend::make_nvrtc_backend();
  for (const bool report : {false, true}) {
    INFO("report " << report);
    backend::CompileRequest req = op->compile_request();
    req.options.clear();
    if (report) req.options.push_back("-DWINNOW_KNN_WAIT_REPORT=1");
    const backend::CompileResult r = be->compile(req, /*emit_ptx=*/true);
    const std::string text = test::ptx_entry_text(r.ptx, "winnow_knn_stream");
    REQUIRE_FALSE(text.empty());
    CHECK((text.find("vprintf") != std::string::npos) == report);
    CHECK(text.find("trap;") != std::string::npos);
  }
}

TEST_CASE("the retrieval mode's top-k plans take the radix fallback rounds", "[knn][codegen]") {
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  const auto p = knn_problem(ir::ip(), 768, 1024, ops::DType::F16);
  const std::string text = ops::TopkOp::create(p, nullptr)->plan_text();
  INFO(text);
  CHECK(text.find("rounds=7 radix=true") != std::string::npos);
}
