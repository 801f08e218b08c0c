// The topk op's tunable space (ops/topk/topk_space.h): the heuristic plan is unchanged and is the
// baseline, every point that survives pruning fits the limits, points that break one are
// pruned with a reason, and a point's text reads back. Then tune_topk over a real space
// with the fake timer (tests/fake_tuner.h): the winner is the fastest and lands in the
// database, where plan build finds it.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/plan/kernel_plan.h"
#include "ops/common/jit_module.h"
#include "ops/common/names.h"
#include "ops/topk/topk_space.h"
#include "ops/topk/topk_tuning.h"
#include "ops/common/validate.h"
#include "tests/cache_support.h"
#include "tests/fake_tuner.h"
#include "knn/knn_workspace.cuh"

using namespace winnow;

namespace {

ops::TopkProblem dsa_problem() {  // relu_mh, 64 heads, d 128, fp8 with key scales, k 2048
  ops::TopkProblem p;
  p.score = ops::find_builtin_score(WINNOW_SCORE_RELU_MH)->program(true);
  p.arch = backend::parse_arch("sm_90a");
  p.window = ops::WindowKind::Causal;
  return p;
}

ops::TopkProblem cuda_core_problem() {  // fp32: CUDA-core dots
  ops::TopkProblem p = dsa_problem();
  p.q_dtype = p.k_dtype = ops::DType::F32;
  p.heads = 8;
  p.score = ops::find_builtin_score(WINNOW_SCORE_RELU_MH)->program(false);
  return p;
}

}  // namespace

TEST_CASE("plan knobs: none keep the heuristic plan, its own values give the same plan",
          "[tune]") {
  for (const ops::TopkProblem& p : {dsa_problem(), cuda_core_problem()}) {
    const auto heuristic = ops::TopkOp::create(p, nullptr);
    const plan::KernelPlan& h = heuristic->kernel_plan();
    ops::TopkProblem same = p;
    same.plan_knobs = {h.rows_per_cta, h.key_tile, h.bins};
    CHECK(ops::TopkOp::create(same, nullptr)->plan_text() == heuristic->plan_text());
    CHECK(ops::TopkOp::create(same, nullptr)->source() == heuristic->source());
  }
  // The heuristic plan of DSA on sm_90a, as before the knobs existed.
  const auto dsa = ops::TopkOp::create(dsa_problem(), nullptr);
  CHECK(dsa->kernel_plan().rows_per_cta == 2);
  CHECK(dsa->kernel_plan().key_tile == 128);
  CHECK(dsa->kernel_plan().wgmma);
}

TEST_CASE("plan knobs: a point that does not fit is refused, not replaced", "[tune]") {
  ops::TopkProblem p = dsa_problem();
  p.q_dtype = p.k_dtype = ops::DType::F32;
  p.plan_knobs.rows_per_cta = 16;  // 16 rows x 64 heads x 128 fp32 of q: 512 KiB
  const std::string why = ops::topk_point_refusal(p, ops::point_of(p), nullptr);
  CHECK_THAT(why, Catch::Contains("do not fit"));
  ops::TopkProblem bad = dsa_problem();
  bad.plan_knobs.key_tile = 48;
  CHECK_THROWS_WITH(ops::TopkOp::create(bad, nullptr),
                    Catch::Contains("key_tile = 48 must be 16, 32, 64 or 128"));
  bad = dsa_problem();
  bad.plan_knobs.bins = 100;
  CHECK_THROWS_WITH(ops::TopkOp::create(bad, nullptr), Catch::Contains("bins = 100"));
  bad = dsa_problem();
  bad.max_ctas_per_sm = 99;
  CHECK_THROWS_WITH(ops::TopkOp::create(bad, nullptr), Catch::Contains("max_ctas_per_sm = 99"));
  for (int form : {-1, 3}) {
    bad = dsa_problem();
    bad.plan_knobs.pipeline = form;
    CHECK_THROWS_WITH(ops::TopkOp::create(bad, nullptr),
                      Catch::Contains(fmt::format("pipeline = {} must be", form)));
  }
  // CUDA-core dots never take the 128-key tile.
  ops::TopkProblem cc = cuda_core_problem();
  cc.plan_knobs.key_tile = 128;
  CHECK_FALSE(ops::topk_point_refusal(cc, ops::point_of(cc), nullptr).empty());
}

TEST_CASE("tunable space: pruned by the limits, baseline first, no duplicates", "[tune]") {
  for (const ops::TopkProblem& p : {dsa_problem(), cuda_core_problem()}) {
    const ops::TopkShape shape{4096, 65536};
    const ops::TopkSpace space = ops::topk_space(p, nullptr, shape);
    INFO(ops::TopkOp::create(p, nullptr)->plan_text());
    REQUIRE(space.candidates.size() > 10);
    // The wgmma path's two forms only where the problem's plan is on wgmma.
    const bool wgmma = ops::TopkOp::create(p, nullptr)->kernel_plan().wgmma;
    const int forms = wgmma ? 2 : 1;
    // Each form over four key tiles.
    const int tiles = forms * 4;
    CHECK(space.considered == std::size_t(5 * tiles * 3 * 2 * 2 * 3 * 3));
    CHECK(space.pruned > 0);
    CHECK_FALSE(space.first_pruned_reason.empty());
    CHECK(space.considered ==
          space.pruned + space.duplicates + space.candidates.size() - 1);  // - the baseline
    REQUIRE(space.candidates[0].baseline);
    CHECK(space.candidates[0].plan_text == ops::TopkOp::create(p, nullptr)->plan_text());
    std::set<std::string> seen;
    for (const ops::TopkCandidate& c : space.candidates) {
      INFO(c.point.text());
      CHECK(ops::topk_point_refusal(p, c.point, nullptr).empty());
      const auto op = ops::TopkOp::create(ops::with_point(p, c.point), nullptr);
      CHECK(op->kernel_plan().smem_bytes() <= ops::kDefaultSmemLimit);
      CHECK(op->kernel_plan().capacity >= p.k);
      if (op->kernel_plan().mma == 0) CHECK(op->kernel_plan().key_tile != 128);
      CHECK(c.predicted_us > 0);
      CHECK(seen.insert(c.plan_text + c.point.text()).second);
    }
    // The wgmma problem's space holds the pipelined form.
    if (forms == 2) {
      auto has = [&](const char* text) {
        return std::any_of(space.candidates.begin(), space.candidates.end(),
                           [&](const ops::TopkCandidate& c) {
                             return c.plan_text.find(text) != std::string::npos;
                           });
      };
      CHECK(has("pipelined=true"));
      CHECK(has("pipelined=false"));
      // ... and a shortlist of 12 times each form (the cost model ranks them low).
      std::vector<rt::tune::Candidate> all;
      for (const auto& c : space.candidates)
        all.push_back({c.point.text(), c.predicted_us, c.baseline, c.family});
      std::set<std::string> forms_timed;
      for (std::size_t i : rt::tune::shortlist(all, 12)) {
        const std::string& t = space.candidates[i].plan_text;
        forms_timed.insert(t.find("pipelined=true") != std::string::npos ? "pipelined" : "plain");
      }
      CHECK(forms_timed.size() == 2);
    }
  }
}

TEST_CASE("tunable space: the retrieval mode's stages, capacity, sample and CTAs", "[tune]") {
  test::ScopedEnv retrieval{"WINNOW_KNN_RETRIEVAL", "1"};
  ops::TopkProblem p = dsa_problem();
  p.score = ops::find_builtin_score(WINNOW_SCORE_IP)->program(false);
  p.heads = 1;
  p.head_dim = GENERATE(768, 128);
  INFO("d " << p.head_dim);
  p.q_dtype = p.k_dtype = ops::DType::F16;
  p.window = ops::WindowKind::Dense;
  p.k = 128;
  REQUIRE(ops::TopkOp::create(p, nullptr)->retrieval_mode());
  const ops::TopkSpace space = ops::topk_space(p, nullptr, {64, 1 << 20});
  CHECK(space.retrieval_mode);
  // Each knob alone (7 stages, 2 capacities, 3 samples, 2 CTAs), then 8 x 2 x 3 x 2.
  CHECK(space.considered == 7 + 2 + 3 + 1 + 8 * 2 * 3 * 2);
  CHECK(space.candidates.size() + space.pruned + space.duplicates == space.considered + 1);
  REQUIRE(space.candidates.size() >= 2);
  std::set<std::string> texts;
  for (const ops::TopkCandidate& c : space.candidates) {
    INFO(c.plan_text);
    CHECK_THAT(c.plan_text, Catch::Contains("knn dim=" + std::to_string(p.head_dim)));
    CHECK(texts.insert(c.plan_text + std::to_string(c.point.max_ctas_per_sm)).second);
  }
  // The knobs alone come first, right after the baseline: the shortlist keeps that order.
  const auto has = [&](const std::string& what) {
    return std::any_of(space.candidates.begin(), space.candidates.end(),
                       [&](const ops::TopkCandidate& c) { return c.plan_text.find(what) != std::string::npos; });
  };
  CHECK(has("capacity=8192 "));  // twice 4 max(k, 1024)
  CHECK_FALSE(has("capacity=2048 "));
  CHECK(has("sample_keys=16384 "));
  CHECK(has("sample_keys=63360 "));
  // Two stream CTAs of d = 768 (the 64 queries alone take 96 KB) never fit an SM; of d =
  // 128 they do, with fewer stages.
  CHECK(has("ctas_per_sm=2 ") == (p.head_dim == 128));
  ops::TopkProblem bad = p;
  bad.plan_knobs.stages = 1;
  CHECK_THROWS_WITH(ops::TopkOp::create(bad, nullptr), Catch::Contains("stages = 1 must be in 2..8"));
  bad.plan_knobs.stages = 3;
  CHECK_THAT(ops::TopkOp::create(bad, nullptr)->plan_text(), Catch::Contains("stages=3"));
  // A capacity above the default is rounded up to a multiple of 1024, one below it is the
  // default; a sample is whole tiles; no sample at all keeps the problem out of the mode.
  ops::TopkProblem knobs = p;
  knobs.candidate_capacity = 5000;
  knobs.sample_size = 5000;
  const auto op = ops::TopkOp::create(knobs, nullptr);
  CHECK_THAT(op->plan_text(), Catch::Contains("capacity=5120 "));
  CHECK_THAT(op->plan_text(), Catch::Contains("sample_keys=5120 "));
  knobs.candidate_capacity = 1;
  CHECK_THAT(ops::TopkOp::create(knobs, nullptr)->plan_text(), Catch::Contains("capacity=4096 "));
  // The sample is never below the rule's 16 N / max(k, 1024) keys.
  CHECK(winnow::knn_sample(1 << 20, 128, 4096, winnow::kKnnMaxSampleCap, 512).tiles ==
        winnow::knn_sample(1 << 20, 128, 4096, winnow::kKnnMaxSampleCap).tiles);
  CHECK(winnow::knn_sample(1 << 20, 128, 4096, winnow::kKnnMaxSampleCap, 32768).tiles == 256);
  knobs.sample_size = 0;
  CHECK_FALSE(ops::TopkOp::create(knobs, nullptr)->retrieval_mode());
}

TEST_CASE("tunable space: the cost model prefers fewer key re-reads", "[tune]") {
  // More rows per CTA: fewer row blocks, each streaming the keys once.
  const ops::TopkProblem p = cuda_core_problem();
  ops::TopkPoint one{1, 64, 2048, -1, 0, 1, 0}, eight{8, 64, 2048, -1, 0, 1, 0};
  const auto op1 = ops::TopkOp::create(ops::with_point(p, one), nullptr);
  const auto op8 = ops::TopkOp::create(ops::with_point(p, eight), nullptr);
  const ops::TopkShape shape{65536, 65536};
  const ops::DeviceModel dev;
  CHECK(ops::topk_cost_us(p, op8->kernel_plan(), eight, shape, dev) <
        ops::topk_cost_us(p, op1->kernel_plan(), one, shape, dev));
}

TEST_CASE("tunable space: a point's text reads back, other text does not", "[tune]") {
  const ops::TopkPoint p{4, 32, 1024, 4096, 16384, 1, 2, 5, 1};
  const auto back = ops::parse_topk_point(p.text());
  REQUIRE(back);
  CHECK(*back == p);
  // pipeline=2 named the filter-warpgroup form, removed: such a record is no point.
  std::string removed_form = p.text();
  removed_form.replace(removed_form.find(" pipeline=1"), 11, " pipeline=2");
  CHECK_FALSE(ops::parse_topk_point(removed_form));
  // A record from before the pipeline knob reads as the heuristic's form.
  std::string old = p.text();
  old.erase(old.find(" pipeline="));
  const auto old_back = ops::parse_topk_point(old);
  REQUIRE(old_back);
  CHECK(old_back->pipeline == 0);
  CHECK(old_back->stages == 5);
  CHECK_FALSE(ops::parse_topk_point(p.text() + " pipeline=1"));  // twice
  CHECK_FALSE(ops::parse_topk_point(""));
  CHECK_FALSE(ops::parse_topk_point("rows_per_cta=4"));
  CHECK_FALSE(ops::parse_topk_point(p.text() + " extra=1"));
  CHECK_FALSE(ops::parse_topk_point(p.text() + " key_tile=64"));  // twice
  std::string junk = p.text();
  junk.replace(junk.find("=32"), 3, "=3x");
  CHECK_FALSE(ops::parse_topk_point(junk));
}

TEST_CASE("tunable space: a knob text changes only the knobs it names", "[tune]") {
  const ops::TopkPoint base{4, 32, 1024, 4096, 16384, 1, 2, 5, 1};
  std::string why;
  const auto p = ops::point_with_knobs(base, "sample_size=1024 bins=512", &why);
  REQUIRE(p);
  ops::TopkPoint want = base;
  want.sample_size = 1024;
  want.bins = 512;
  CHECK(*p == want);
  CHECK_FALSE(ops::point_with_knobs(base, "samples=3", &why));
  CHECK(why.find("no knob 'samples'") != std::string::npos);
  CHECK_FALSE(ops::point_with_knobs(base, "", &why));
  CHECK_FALSE(ops::point_with_knobs(base, "bins=1x", &why));
  CHECK(why.find("NAME=VALUE") != std::string::npos);
}

TEST_CASE("tune_topk with a fake timer: the fastest point is stored and found again",
          "[tune]") {
  test::TempDir dir;
  const auto be = backend::make_nvrtc_backend();
  const ops::TopkProblem p = dsa_problem();
  const ops::TopkShape shape{4096, 65536};
  const ops::TopkSpace space = ops::topk_space(p, nullptr, shape);
  rt::tune::Settings s;
  s.top_n = 6;
  s.repeats = 3;
  s.warmup = 1;
  std::vector<rt::tune::Candidate> all;
  for (const auto& c : space.candidates)
    all.push_back({c.point.text(), c.predicted_us, c.baseline, c.family});
  const std::vector<std::size_t> picked = rt::tune::shortlist(all, s.top_n);
  REQUIRE(picked.size() == 7);
  REQUIRE(picked[0] == 0);  // the baseline
  // The baseline takes 100 us, the others 89..84: the shortlist's last is the fastest. Its
  // compile fails in one run, then the next fastest wins.
  test::FakeTimer timer;
  for (std::size_t j = 0; j < picked.size(); ++j)
    timer.times[picked[j]] = {j == 0 ? 100.0 : 90.0 - double(j)};
  rt::TuningDb db(dir.path);
  const rt::TuningKey key = ops::topk_tuning_key(p, nullptr, *be, shape);
  test::FakeCompiler compiler;
  const std::size_t second = picked[picked.size() - 2];
  SECTION("all compile") {
    const ops::TopkTuneResult r = ops::tune_topk(space, compiler, timer, s, &db, key);
    REQUIRE(r.best);
    CHECK(*r.best == space.candidates[picked.back()].point);
    CHECK(r.best_us == 90.0 - double(picked.size() - 1));
    CHECK(r.baseline_us == 100.0);
    CHECK(r.stored);
  }
  SECTION("the fastest fails to compile") {
    compiler.fail = {picked.back()};
    const ops::TopkTuneResult r = ops::tune_topk(space, compiler, timer, s, &db, key);
    REQUIRE(r.best);
    CHECK(*r.best == space.candidates[second].point);
    CHECK_THAT(r.timings, Catch::Contains("compile failed"));
  }
  // The record names the winner, keeps every candidate's timings, and plan build finds it.
  const auto found = ops::find_tuned_point(db, key, p, nullptr);
  REQUIRE(found);
  const std::size_t winner = compiler.fail.empty() ? picked.back() : second;
  CHECK(found->point == space.candidates[winner].point);
  CHECK(found->record.heuristic_us == 100.0);
  CHECK(std::count(found->record.timings.begin(), found->record.timings.end(), '\n') == 7);
  // Another shape bucket misses.
  CHECK_FALSE(ops::find_tuned_point(db, ops::topk_tuning_key(p, nullptr, *be, {8192, 65536}), p,
                                    nullptr));
}

TEST_CASE("find_tuned_point: a stored point that no longer fits is a miss with a warning",
          "[tune]") {
  test::TempDir dir;
  const auto be = backend::make_nvrtc_backend();
  const ops::TopkProblem p = dsa_problem();
  const rt::TuningKey key = ops::topk_tuning_key(p, nullptr, *be, {4096, 65536});
  rt::TuningDb db(dir.path);
  rt::TunedRecord r;
  r.params = ops::TopkPoint{16, 128, 2048, -1, 0, 0, 0}.text();  // does not fit
  r.time_us = 1;
  REQUIRE(db.store(key, r));
  cache_test::StderrCapture err;
  CHECK_FALSE(ops::find_tuned_point(db, key, p, nullptr));
  r.params = "rows_per_cta=banana";
  REQUIRE(db.store(key, r));
  CHECK_FALSE(ops::find_tuned_point(db, key, p, nullptr));
  const std::string text = err.finish();
  CHECK_THAT(text, Catch::Contains("no longer fits"));
  CHECK_THAT(text, Catch::Contains("not one this winnow reads"));
}

TEST_CASE("tuning key: the shape bucket, k bucket and compile options are in it", "[tune]") {
  const auto be = backend::make_nvrtc_backend();
  ops::TopkProblem p = dsa_problem();
  const rt::TuningKey base = ops::topk_tuning_key(p, nullptr, *be, {4096, 65536});
  CHECK(ops::topk_tuning_key(p, nullptr, *be, {2049, 40000}) == base);  // same buckets
  CHECK_FALSE(ops::topk_tuning_key(p, nullptr, *be, {4097, 65536}) == base);
  CHECK(base.window == "causal/1");
  CHECK(base.gpu == "none");
  p.k = 2047;
  CHECK(ops::topk_tuning_key(p, nullptr, *be, {4096, 65536}) == base);
  p.k = 2049;
  CHECK_FALSE(ops::topk_tuning_key(p, nullptr, *be, {4096, 65536}) == base);
  p = dsa_problem();
  p.heads = 32;
  CHECK_FALSE(ops::topk_tuning_key(p, nullptr, *be, {4096, 65536}) == base);
  test::ScopedEnv options{"WINNOW_NVRTC_OPTIONS", "-lineinfo"};
  CHECK_FALSE(ops::topk_tuning_key(dsa_problem(), nullptr, *be, {4096, 65536}) == base);
}
