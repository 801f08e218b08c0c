// The tuner's loop (runtime/tuner.h) against a fake compiler and timer: it times the
// shortlist, keeps every timing, picks the lowest median, records failures and skips them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/fake_tuner.h"

using namespace winnow;
using rt::tune::Candidate;
using rt::tune::Outcome;

namespace {

std::vector<Candidate> five() {
  // predicted costs rank them 3, 1, 4, 0, 2; candidate 0 is the baseline.
  return {{"p0", 40, true}, {"p1", 20, false}, {"p2", 50, false}, {"p3", 10, false},
          {"p4", 30, false}};
}

rt::tune::Settings quick() {
  rt::tune::Settings s;
  s.top_n = 10;
  s.warmup = 2;
  s.repeats = 5;
  s.compile_threads = 2;
  return s;
}

const rt::tune::Measurement& of(const rt::tune::Result& r, std::size_t candidate) {
  for (const auto& m : r.tried)
    if (m.candidate == candidate) return m;
  FAIL("candidate " << candidate << " was not tried");
  return r.tried.front();
}

}  // namespace

TEST_CASE("tuner: median of an odd and an even count", "[tune]") {
  CHECK(rt::tune::median({}) == 0);
  CHECK(rt::tune::median({5, 1, 3}) == 3);
  CHECK(rt::tune::median({4, 1, 3, 2}) == 2.5);
}

TEST_CASE("tuner: the shortlist is the baseline and the cheapest top_n", "[tune]") {
  const auto all = five();
  CHECK(rt::tune::shortlist(all, 2) == std::vector<std::size_t>{0, 3, 1});
  CHECK(rt::tune::shortlist(all, 0) == std::vector<std::size_t>{0});
  CHECK(rt::tune::shortlist(all, 99) == std::vector<std::size_t>{0, 3, 1, 4, 2});
}

TEST_CASE("tuner: the shortlist takes the cheapest of each family before a second of any",
          "[tune]") {
  // Costs rank them 3, 1, 4, 0, 2, 5; 3, 1 and 4 are one family, 2 and 5 another.
  std::vector<Candidate> all = five();
  all.push_back({"p5", 60, false});
  all[3].family = all[1].family = all[4].family = "a";
  all[2].family = all[5].family = "b";
  CHECK(rt::tune::shortlist(all, 2) == std::vector<std::size_t>{0, 3, 2});
  CHECK(rt::tune::shortlist(all, 3) == std::vector<std::size_t>{0, 3, 1, 2});
  CHECK(rt::tune::shortlist(all, 99) == std::vector<std::size_t>{0, 3, 1, 4, 2, 5});
  // Without families: the cheapest, as before.
  for (Candidate& c : all) c.family.clear();
  CHECK(rt::tune::shortlist(all, 2) == std::vector<std::size_t>{0, 3, 1});
}

TEST_CASE("tuner: picks the lowest median and keeps every timing", "[tune]") {
  const auto all = five();
  test::FakeCompiler compiler;
  test::FakeTimer timer;
  // Candidate 4 has the lowest median (12) though 2 has the lowest single run (1). The drop
  // rule off: every candidate timed R times, whatever its warm-up runs.
  timer.times = {{0, {20, 20, 20, 20, 20, 20, 20}}, {1, {15, 15, 15, 15, 15, 15, 15}},
                 {2, {90, 90, 1, 90, 90, 90, 90}},  {3, {14, 14, 14, 14, 14, 14, 14}},
                 {4, {99, 99, 12, 12, 12, 99, 99}}};
  rt::tune::Settings s = quick();
  s.drop_ratio = 0;
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, s);
  REQUIRE(r.best >= 0);
  CHECK(r.tried[std::size_t(r.best)].candidate == 4);
  CHECK(r.tried[std::size_t(r.best)].median_us == 12);
  REQUIRE(r.baseline == 0);
  CHECK(r.tried[0].candidate == 0);
  CHECK(r.tried[0].median_us == 20);
  for (const auto& m : r.tried) {
    CHECK(m.outcome == Outcome::Timed);
    CHECK(m.timings_us.size() == 5);                 // R runs kept
    CHECK(timer.runs[m.candidate] == 2 + 5);         // after two warm-up runs
    CHECK(m.info == "fake launch " + std::to_string(m.candidate));
  }
  // The warm-up runs are not among the kept ones: candidate 4's runs 2..6.
  CHECK(of(r, 4).timings_us == std::vector<double>{12, 12, 12, 99, 99});
  CHECK(timer.released.size() == 5);
}

TEST_CASE("tuner: a candidate slower than drop_ratio x the baseline in two runs in a row is dropped", "[tune]") {
  const auto all = five();
  test::FakeCompiler compiler;
  test::FakeTimer timer;
  // Baseline 20 us, limit 3 x 20 = 60: 1 is slow in both warm-up runs (dropped after them);
  // 2 only in its first (a cold run: timed); 3 fast; 4 slow but under the limit.
  timer.times = {{0, {20}}, {1, {500, 400, 1, 1, 1, 1, 1}}, {2, {500, 30, 30, 30, 30, 30, 30}},
                 {3, {10}}, {4, {59}}};
  rt::tune::Settings s = quick();
  s.warmup = 3;
  s.drop_ratio = 3;
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, s);
  REQUIRE(r.baseline == 0);
  CHECK(of(r, 1).outcome == Outcome::Dropped);
  CHECK(timer.runs[1] == 2);  // two warm-up runs, no timed ones
  CHECK(of(r, 1).timings_us == std::vector<double>{500, 400});
  CHECK(of(r, 1).median_us == 450);
  CHECK(std::string(rt::tune::outcome_name(Outcome::Dropped)) == "dropped (slow)");
  for (std::size_t i : {0, 2, 3, 4}) {
    INFO("candidate " << i);
    CHECK(of(r, i).outcome == Outcome::Timed);
    CHECK(timer.runs[i] == 3 + 5);
  }
  CHECK(r.tried[std::size_t(r.best)].candidate == 3);
  // Without a timed baseline (its launch refused) there is no limit: nothing is dropped,
  // and candidate 1's fast timed runs win.
  test::FakeTimer t2;
  t2.times = timer.times;
  t2.fail_prepare = {0};
  const rt::tune::Result r2 = rt::tune::run_tuner(all, compiler, t2, s);
  CHECK(of(r2, 1).outcome == Outcome::Timed);
  CHECK(r2.tried[std::size_t(r2.best)].candidate == 1);
}

TEST_CASE("tuner: compile and launch failures are recorded and skipped", "[tune]") {
  const auto all = five();
  test::FakeCompiler compiler;
  compiler.fail = {3};        // the cheapest by prediction
  test::FakeTimer timer;
  timer.fail_prepare = {1};
  timer.fail_run = {4};
  timer.times = {{0, {20}}, {1, {1}}, {2, {30}}, {3, {1}}, {4, {1}}};
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, quick());
  CHECK(of(r, 3).outcome == Outcome::CompileFailed);
  CHECK_THAT(of(r, 3).error, Catch::Contains("fake compile error 3"));
  CHECK(of(r, 1).outcome == Outcome::LaunchFailed);
  CHECK_THAT(of(r, 1).error, Catch::Contains("fake launch refused 1"));
  CHECK(of(r, 4).outcome == Outcome::LaunchFailed);
  CHECK_THAT(of(r, 4).error, Catch::Contains("fake launch error 4"));
  // A candidate that failed to compile is never loaded.
  CHECK(std::count(timer.prepared.begin(), timer.prepared.end(), 3u) == 0);
  REQUIRE(r.best >= 0);
  CHECK(r.tried[std::size_t(r.best)].candidate == 0);  // 20 beats 30; the failed 1 us do not count
}

TEST_CASE("tuner: nothing timed gives no winner", "[tune]") {
  const auto all = five();
  test::FakeCompiler compiler;
  compiler.fail = {0, 1, 2, 3, 4};
  test::FakeTimer timer;
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, quick());
  CHECK(r.best == -1);
  CHECK(timer.prepared.empty());
}

TEST_CASE("tuner: compiles run in parallel", "[tune]") {
  std::vector<Candidate> all;
  for (int i = 0; i < 8; ++i) all.push_back({"p" + std::to_string(i), double(i), false});
  test::FakeCompiler compiler;
  compiler.sleep_ms = 50;
  test::FakeTimer timer;
  for (std::size_t i = 0; i < 8; ++i) timer.times[i] = {double(10 - i)};
  rt::tune::Settings s = quick();
  s.compile_threads = 4;
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, s);
  CHECK(compiler.calls == 8);
  CHECK(compiler.most_at_once > 1);
  CHECK(compiler.most_at_once <= 4);
  CHECK(r.tried[std::size_t(r.best)].candidate == 7);
}

TEST_CASE("tuner: past the budget only the baseline is timed", "[tune]") {
  const auto all = five();
  test::FakeCompiler compiler;
  test::FakeTimer timer;
  timer.times = {{0, {20}}, {1, {1}}, {2, {1}}, {3, {1}}, {4, {1}}};
  rt::tune::Settings s = quick();
  s.budget_s = 0;
  std::vector<std::size_t> progress;
  s.progress = [&](std::size_t done, std::size_t total, double) {
    progress.push_back(done);
    CHECK(total == 10);
  };
  const rt::tune::Result r = rt::tune::run_tuner(all, compiler, timer, s);
  CHECK(of(r, 0).outcome == Outcome::Timed);
  for (std::size_t i : {1, 2, 3, 4}) CHECK(of(r, i).outcome == Outcome::OverBudget);
  CHECK(r.tried[std::size_t(r.best)].candidate == 0);
  CHECK(progress.size() == 10);
  CHECK(progress.back() == 10);
}

namespace {

// The tuner over five() with every run also taking its time on the wall clock, the budget
// given and no drop rule.
rt::tune::Result run_on_clock(test::FakeTimer& timer, double budget_s) {
  test::FakeCompiler compiler;
  timer.sleep = true;
  rt::tune::Settings s = quick();
  s.budget_s = budget_s;
  s.drop_ratio = 0;
  return rt::tune::run_tuner(five(), compiler, timer, s);
}

}  // namespace

TEST_CASE("tuner: a candidate that would end past the budget is not started", "[tune]") {
  // The baseline's 7 runs take 0.21 s of the 0.3 s budget: another 7 x 30 ms would end past
  // it, so no other candidate runs at all.
  test::FakeTimer timer;
  timer.times = {{0, {30000}}, {1, {1}}, {2, {1}}, {3, {1}}, {4, {1}}};
  const rt::tune::Result r = run_on_clock(timer, 0.3);
  CHECK(of(r, 0).outcome == Outcome::Timed);
  for (std::size_t i : {1, 2, 3, 4}) {
    INFO("candidate " << i);
    CHECK(of(r, i).outcome == Outcome::OverBudget);
    CHECK(timer.runs[i] == 0);
  }
}

TEST_CASE("tuner: a candidate is stopped before a run that would end past the budget", "[tune]") {
  // Candidate 3 (the cheapest predicted, timed right after the 1 ms baseline) takes 150 ms a
  // run: at most three of its seven fit the 0.5 s budget; it stops with what it ran.
  test::FakeTimer timer;
  timer.times = {{0, {1000}}, {1, {1}}, {2, {1}}, {3, {150000}}, {4, {1}}};
  const rt::tune::Result r = run_on_clock(timer, 0.5);
  REQUIRE(r.tried[1].candidate == 3);
  const rt::tune::Measurement& m = of(r, 3);
  CHECK(m.outcome == Outcome::OverBudget);
  CHECK(timer.runs[3] >= 1);
  CHECK(timer.runs[3] <= 3);
  CHECK(m.timings_us.size() == std::size_t(timer.runs[3]));
  CHECK(r.tried[std::size_t(r.best)].candidate != 3);
}
