// block-select's tunable space (ops/block/block_space.h) and its tuning (ops/block/block_tuning.h): the
// heuristic point is the baseline, points that pick the same kernels are duplicates, a
// point's text reads back, the key buckets the length; then tune_block with the fake timer
// (tests/fake_tuner.h): the fastest point is stored and found again, and a stored point that
// cannot be read or no longer fits is a miss with a warning.
#include <catch2/catch.hpp>

#include <algorithm>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "ops/block/block_space.h"
#include "ops/block/block_tuning.h"
#include "tests/cache_support.h"
#include "tests/fake_tuner.h"

using namespace winnow;

namespace {

ops::BlockProblem problem(const char* arch) {
  ops::BlockProblem p;
  p.arch = backend::parse_arch(arch);
  return p;
}

}  // namespace

TEST_CASE("block space: the heuristic first, every choice of kernels once", "[tune][block]") {
  // sm_90a: both steps on wgmma by default; the four choices, the baseline among them.
  const ops::BlockSpace s = ops::block_space(problem("sm_90a"), nullptr, 131072);
  CHECK(s.considered == 5);
  CHECK(s.pruned == 0);
  CHECK(s.duplicates == 1);
  REQUIRE(s.candidates.size() == 4);
  CHECK(s.candidates[0].baseline);
  CHECK(s.candidates[0].point == ops::BlockPoint{1, 1});
  for (std::size_t i = 1; i < s.candidates.size(); ++i) CHECK_FALSE(s.candidates[i].baseline);
  CHECK(std::count_if(s.candidates.begin(), s.candidates.end(),
                      [](const ops::BlockCandidate& c) { return c.point == ops::BlockPoint{0, 0}; }) == 1);
  // The cost model ranks the wgmma kernels first (they are faster on the H200).
  const auto cost = [&](ops::BlockPoint pt) {
    for (const auto& c : s.candidates)
      if (c.point == pt) return c.predicted_us;
    return -1.0;
  };
  CHECK(cost({1, 1}) < cost({0, 1}));
  CHECK(cost({1, 1}) < cost({1, 0}));
  CHECK(cost({0, 1}) < cost({0, 0}));
  // The baseline follows the problem's own choice.
  ops::BlockProblem q = problem("sm_90a");
  q.score_wgmma = 0;
  const ops::BlockSpace s2 = ops::block_space(q, nullptr, 131072);
  REQUIRE(!s2.candidates.empty());
  CHECK(s2.candidates[0].point == ops::BlockPoint{0, 1});
  // sm_100a has the mma.sync kernels only: the baseline alone.
  const ops::BlockSpace b = ops::block_space(problem("sm_100a"), nullptr, 131072);
  REQUIRE(b.candidates.size() == 1);
  CHECK(b.candidates[0].point == ops::BlockPoint{0, 0});
  CHECK(b.duplicates == 4);
}

TEST_CASE("block space: a point's text reads back, other text does not", "[tune][block]") {
  for (const ops::BlockPoint p : {ops::BlockPoint{1, 1}, ops::BlockPoint{0, 1}, ops::BlockPoint{-1, 0}}) {
    INFO(p.text());
    const auto back = ops::parse_block_point(p.text());
    REQUIRE(back);
    CHECK(*back == p);
  }
  CHECK(ops::BlockPoint{1, 0}.text() == "score_wgmma=1 attention_wgmma=0");
  for (const char* bad : {"", "score_wgmma=1", "score_wgmma=1 attention_wgmma=2",
                          "score_wgmma=1 attention_wgmma=1 stages=2", "score_wgmma=x attention_wgmma=1",
                          "score_wgmma=1 score_wgmma=1", "rows_per_cta=1 key_tile=64",
                          "score_wgmma=1 attention_wgmma=1 attention_cluster=1"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(ops::parse_block_point(bad));
  }
}

TEST_CASE("block tuning key: the length's bucket, the heads and the compile options", "[tune][block]") {
  const auto be = backend::make_nvrtc_backend();
  const ops::BlockProblem p = problem("sm_90a");
  const rt::TuningKey base = ops::block_tuning_key(p, nullptr, *be, 131072);
  CHECK(base.op == "block-select");
  CHECK(base.window == "causal");
  CHECK(base.gpu == "none");
  CHECK(ops::block_tuning_key(p, nullptr, *be, 65536 + 128) == base);  // same bucket
  CHECK_FALSE(ops::block_tuning_key(p, nullptr, *be, 65536) == base);
  ops::BlockProblem q = p;
  q.kv_heads = 4;
  CHECK_FALSE(ops::block_tuning_key(q, nullptr, *be, 131072) == base);
  q = p;
  q.head_dim = 64;
  CHECK_FALSE(ops::block_tuning_key(q, nullptr, *be, 131072) == base);
  test::ScopedEnv options{"WINNOW_NVRTC_OPTIONS", "-lineinfo"};
  CHECK_FALSE(ops::block_tuning_key(p, nullptr, *be, 131072) == base);
}

TEST_CASE("tune_block with a fake timer: the fastest point is stored and found again", "[tune][block]") {
  test::TempDir dir;
  const auto be = backend::make_nvrtc_backend();
  const ops::BlockProblem p = problem("sm_90a");
  const ops::BlockSpace space = ops::block_space(p, nullptr, 131072);
  REQUIRE(space.candidates.size() == 4);
  rt::tune::Settings s;
  s.repeats = 3;
  s.warmup = 1;
  // The baseline 100 us; candidate 3 the fastest (80), 1 and 2 slower than the baseline.
  test::FakeTimer timer;
  timer.times = {{0, {100}}, {1, {120}}, {2, {110}}, {3, {80}}};
  test::FakeCompiler compiler;
  rt::TuningDb db(dir.path);
  const rt::TuningKey key = ops::block_tuning_key(p, nullptr, *be, 131072);
  const ops::BlockTuneResult r = ops::tune_block(space, compiler, timer, s, &db, key);
  CHECK(compiler.calls == 4);
  REQUIRE(r.best);
  CHECK(*r.best == space.candidates[3].point);
  CHECK(r.tuned.best_us == 80);
  CHECK(r.tuned.baseline_us == 100);
  CHECK(r.tuned.stored);
  const auto found = ops::find_tuned_block_point(db, key, p, nullptr);
  REQUIRE(found);
  CHECK(found->point == space.candidates[3].point);
  CHECK(found->record.heuristic_us == 100);
  CHECK(std::count(found->record.timings.begin(), found->record.timings.end(), '\n') == 4);
  // Another length's bucket misses.
  CHECK_FALSE(ops::find_tuned_block_point(db, ops::block_tuning_key(p, nullptr, *be, 262144), p, nullptr));
}

TEST_CASE("find_tuned_block_point: unreadable or unfitting points are misses with a warning", "[tune][block]") {
  test::TempDir dir;
  const auto be = backend::make_nvrtc_backend();
  ops::BlockProblem p = problem("sm_90a");
  const rt::TuningKey key = ops::block_tuning_key(p, nullptr, *be, 131072);
  rt::TuningDb db(dir.path);
  rt::TunedRecord r;
  r.params = "score_wgmma=banana attention_wgmma=1";
  r.time_us = 1;
  REQUIRE(db.store(key, r));
  cache_test::StderrCapture err;
  CHECK_FALSE(ops::find_tuned_block_point(db, key, p, nullptr));
  // A wgmma score pass asked for where its shared memory does not fit: 2^22 tokens of
  // on-chip score row.
  p.max_seq_len = int64_t(1) << 22;
  r.params = ops::BlockPoint{1, 0}.text();
  REQUIRE(db.store(key, r));
  CHECK_FALSE(ops::find_tuned_block_point(db, key, p, nullptr));
  const std::string text = err.finish();
  CHECK_THAT(text, Catch::Contains("not one this winnow reads"));
  CHECK_THAT(text, Catch::Contains("no longer fits"));
}
