// The fused top-k on the GPU against materialize + exact select (bit for bit) and the
// CPU double reference. Fresh random inputs on every run (the seed is printed).
#include <functional>

#include "support.h"
#include "topk_check.h"

using namespace winnow;
using winnow::test::GpuFixture;

using test::relu_mh_problem;
using test::run_and_check;
using test::single_head;

TEST_CASE("relu_mh fp8 with key scale equals materialize and the reference", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int k = GENERATE(1, 31, 512, 2048);
  auto p = relu_mh_problem(64, k, ops::DType::E4M3);
  p.allow_tensor_cores = GENERATE(true, false);  // mma.sync dots and CUDA-core dots
  INFO("tensor cores " << p.allow_tensor_cores);
  run_and_check(p, 40, 5003, {}, {0, 7, 39}, false);
}

TEST_CASE("relu_mh bf16, H = 32, sorted and absolute indices", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(32, 100, ops::DType::BF16);
  p.score = ir::relu_mh(false);
  p.sorted = GENERATE(false, true);
  p.absolute_indices = true;
  run_and_check(p, 33, 3000, {}, {1, 32}, false);
}

TEST_CASE("heavy ties: few distinct values, ties broken by the smaller index", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int k = GENERATE(1, 100, 2048);
  auto p = relu_mh_problem(64, k, ops::DType::E4M3);
  p.sorted = true;
  ops::DataOptions opt;
  opt.levels = 4;  // integers in [-2, 2]: exact in fp32, so the reference is exact too
  run_and_check(p, 16, 4099, opt, {0, 5, 15}, true);
}

TEST_CASE("NaN and inf scores rank as torch.topk ranks them", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = single_head(ir::ip(), 64, 64, ops::DType::F32);
  p.sorted = true;
  ops::DataOptions opt;
  opt.nan_fraction = 0.01;
  opt.inf_fraction = 0.01;
  run_and_check(p, 24, 3000, opt, {}, false);
}

TEST_CASE("range windows: empty, not tile aligned, k = window, k > window", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, GENERATE(1, 300), ops::DType::E4M3);
  p.window = ops::WindowKind::Ranges;
  ops::DataOptions opt;
  opt.levels = GENERATE(0, 6);
  run_and_check(p, 50, 1000, opt, {}, opt.levels > 0);
}

TEST_CASE("k equal to the window and larger than the window", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int keys = 777;
  auto p = single_head(ir::l2(), 128, GENERATE(777, 1000), ops::DType::F16);
  run_and_check(p, 9, keys, {}, {}, false);
}

TEST_CASE("causal windows with compression ratio m", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, 64, ops::DType::E4M3);
  p.window = ops::WindowKind::Causal;
  p.causal_ratio = GENERATE(1, 4);
  const int64_t rows = 200, keys = 2000;
  p.causal_offset = keys * p.causal_ratio - rows;  // the last row sees every key
  run_and_check(p, rows, keys, {}, {0, 63, 64, 199}, false);
}

TEST_CASE("single-head scores: ip, l2, cosine", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  ir::Expr score = GENERATE(ir::ip(), ir::l2(), ir::cosine());
  auto p = single_head(score, 96, 50, ops::DType::BF16);
  run_and_check(p, 70, 4000, {}, {0, 33, 69}, false);
}

TEST_CASE("retrieval shape: one head, 16 rows on the tensor cores, key splits", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  // The topk kernel's case (the retrieval mode, the default for this shape, has its own).
  test::ScopedEnv topk_kernel("WINNOW_KNN_RETRIEVAL", "0");
  auto p = single_head(ir::ip(), 768, GENERATE(1, 1000, 8192), ops::DType::F16);
  p.sorted = GENERATE(false, true);
  auto r = run_and_check(p, 40, 20011, {}, {0, 17, 39}, false);
  CHECK(r.fallback_rows == 0);
}

TEST_CASE("user expressions compile at run time and stay exact", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const char* text = GENERATE("max_h(dot(h))", "sum_h(w[h] * softplus(dot(h))) * kscale",
                              "sum_h(w[h] * kscale * relu(dot(h)))");  // a term reading kscale
  auto p = relu_mh_problem(16, 40, ops::DType::BF16);
  p.score = ir::parse(text);
  INFO(text);
  run_and_check(p, 20, 2500, {}, {0, 19}, false);
}

TEST_CASE("a candidate buffer overflow falls back and stays exact", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, 64, ops::DType::E4M3);
  p.candidate_capacity = 70;  // barely above k: the filter cannot keep up
  p.sample_size = 0;          // and no sample to set a first threshold
  ops::DataOptions opt;
  opt.levels = GENERATE(0, 2);  // levels 2: nearly every score ties
  auto r = run_and_check(p, 12, 5000, opt, {0, 11}, opt.levels > 0);
  CHECK(r.fallback_rows > 0);
}

TEST_CASE("a sample threshold above the row's k-th falls back and stays exact", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  // The sample sets the first threshold at its m-th best, m < k (here 18 of 64 sampled
  // keys for k = 64). Scaling up exactly the sampled keys puts that threshold above the
  // row's k-th best: fewer than k keys are kept, and the row must take the fallback.
  auto p = relu_mh_problem(64, 64, ops::DType::E4M3);
  p.sample_size = 64;
  p.key_splits = 1;  // the sample positions below are those of the whole window
  const int64_t keys = 5000;
  auto r = run_and_check(p, 6, keys, {}, {0, 5}, false, [&](ops::ProblemData& d) {
    for (auto& w : d.w) w = std::abs(w);  // scores >= 0: a larger scale ranks higher
    for (int64_t i = 0; i < 64; ++i) d.kscale[i * keys / 64] *= 64.0f;
  });
  CHECK(r.fallback_rows == 6);
}

TEST_CASE("key splits: parts scored by different CTAs merge exactly", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, GENERATE(1, 100, 2048), ops::DType::E4M3);
  p.key_splits = GENERATE(2, 7);
  p.window = GENERATE(ops::WindowKind::Dense, ops::WindowKind::Ranges, ops::WindowKind::Causal);
  p.causal_offset = 9000 - 30;
  p.sorted = true;
  ops::DataOptions opt;
  opt.levels = GENERATE(0, 4);
  INFO("splits " << p.key_splits << " window " << int(p.window) << " levels " << opt.levels);
  auto r = run_and_check(p, 30, 9000, opt, {0, 29}, opt.levels > 0);
  CHECK(r.fallback_rows == 0);
}

TEST_CASE("key splits with an overflowing part still merge exactly", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, 64, ops::DType::E4M3);
  p.key_splits = 3;
  p.candidate_capacity = 70;
  p.sample_size = 0;
  ops::DataOptions opt;
  opt.levels = 2;
  auto r = run_and_check(p, 6, 5000, opt, {0, 5}, true);
  CHECK(r.fallback_rows > 0);
}

TEST_CASE("a workspace bound: fewer resident CTAs, the same exact results", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = GpuFixture::get();
  auto p = relu_mh_problem(64, 256, ops::DType::E4M3);
  auto unbounded = f.build(p);
  p.max_workspace_bytes = unbounded->workspace_bytes() / 20;
  auto op = f.build(p);
  CHECK(op->workspace_bytes() <= p.max_workspace_bytes);
  run_and_check(p, 300, 6000, {}, {0, 299}, false);
  p.max_workspace_bytes = 1000;  // not one CTA
  CHECK_THROWS_AS(f.build(p), ops::InvalidArgument);
}

TEST_CASE("a range window past the key count is reported, and its row is all -1", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  auto& f = GpuFixture::get();
  auto p = single_head(ir::ip(), 32, 8, ops::DType::F32);
  p.window = ops::WindowKind::Ranges;
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 4, 100, rng);
  d.window_start = {0, 10, 50, 0};
  d.window_end = {100, 20, 101, 5};  // row 2 runs past the 100 keys
  auto op = f.build(p);
  ops::RunResult r = ops::run_on_device(*op, *f.ctx, d);
  CHECK(r.bad_windows == 1);
  for (int i = 0; i < p.k; ++i) CHECK(r.indices[2 * p.k + i] == -1);
  CHECK(r.indices[1 * p.k] >= 0);
}

// Windows that hold at most k keys, asked for indices only: the kernel selects every key
// of each window without scoring (templates/topk/topk_kernel.cuh); the same call with scores
// takes the full path. The indices agree, and are the windows' positions in order.
TEST_CASE("windows within k and indices only: every key of each window in order", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = GpuFixture::get();
  auto p = relu_mh_problem(64, 2048, ops::DType::E4M3);
  p.window = ops::WindowKind::Ranges;
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 37, 5000, rng);
  const std::vector<int> len = test::windows_within_k(d, p.k, 100);
  auto op = f.build(p);
  const ops::RunResult only = ops::run_on_device(*op, *f.ctx, d, 0, false);
  const ops::RunResult full = ops::run_on_device(*op, *f.ctx, d, 0, true);
  CHECK(only.indices == full.indices);
  CHECK(only.bad_windows == 1);
  int64_t wrong = 0;
  for (size_t r = 0; r < len.size(); ++r)
    for (int i = 0; i < p.k; ++i) wrong += only.indices[r * size_t(p.k) + size_t(i)] != (i < len[r] ? i : -1);
  CHECK(wrong == 0);
}

TEST_CASE("DSA shape: 512 queries x 65536 keys, H = 64, k = 2048", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto p = relu_mh_problem(64, 2048, ops::DType::E4M3);
  // WINNOW_TEST_SMALL: 64 x 8192 (still several key tiles per CTA and key splits).
  const int64_t rows = test::sized(512, 64), keys = test::sized(65536, 8192);
  auto r = run_and_check(p, rows, keys, {}, {0, std::min<int64_t>(311, rows - 1)}, false);
  CHECK(r.fallback_rows == 0);
}
