// The paged decode stream path with a hint (PagedInputs::hint, the previous step's
// selection; templates/paged/paged_stream_hint.cuh) on a GPU: every row equals the CPU
// reference whatever the hint holds (exact, the previous step's on changed queries, stale,
// all -1, duplicated, past the window or the causal limit, in place in the output), at
// mixed lengths (k above some), next_n 1 and 2, sorted rows, ties, and under CUDA-graph
// replay. Fresh random inputs each run (the seed is printed).
#include <algorithm>
#include <random>

#include "ops/paged/paged_stream.h"
#include "paged/paged_cache.cuh"
#include "paged_support.h"
#include "support.h"
#include "testing/paged_harness.h"

using namespace winnow;

namespace {

ops::PagedProblem hint_problem(int k, int next_n, int max_batch, int max_blocks, bool sorted) {
  ops::PagedProblem p = test::decode_problem(64, k, next_n, max_batch, max_blocks);
  p.stream = true;
  p.sorted = sorted;
  return p;
}

// The call with `hint` (given), checked against the reference.
ops::PagedRunResult run_hinted(const ops::PagedTopkOp& op, const ops::PagedHostData& d,
                               const std::vector<int>& hint, bool in_place = false) {
  auto& f = test::GpuFixture::get();
  ops::PagedHint h;
  h.given = true;
  h.rows = hint;
  h.in_place = in_place;
  const ops::PagedRunResult r = ops::run_paged_on_device(op, *f.ctx, d, h);
  CHECK(test::paged_wrong_rows(op.problem(), d, r.indices) == 0);
  CHECK(r.bad_windows == 0);
  return r;
}

}  // namespace

TEST_CASE("paged decode hint equals the reference: exact, previous-step, stale, all -1, "
          "duplicated, out-of-window and in-place hints at mixed lengths",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  auto& f = test::GpuFixture::get();
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int next_n = GENERATE(1, 2);
  const bool sorted = GENERATE(false, true);
  const int levels = GENERATE(0, 3);  // 3: integer inputs, heavy ties
  INFO("next_n " << next_n << " sorted " << sorted << " levels " << levels);
  constexpr int k = 2048;
  // 512 pages: above the list (8192 keys), the plan of 19 launches (18 with a hint).
  auto p = hint_problem(k, next_n, 10, 512, sorted);
  p.arch = ops::device_arch(*f.ctx);
  REQUIRE(ops::paged_stream_steps(p, true).size() + 1 == ops::paged_stream_steps(p).size());
  const int max_len = int(test::sized(32768, 20000));
  const std::vector<int> lens = {max_len, 0, 1, k - 1, k, k + 1, 9000, 20000, 5000, max_len - 3};
  ops::PagedDataOptions opt;
  opt.levels = levels;
  const ops::PagedHostData d = ops::random_paged_data(p, lens, rng, opt);
  auto op = ops::PagedTopkOp::create(p, f.ctx.get());
  op->build(*f.cache, *f.be);
  const size_t rows = size_t(d.batch) * d.next_n;
  // The rows whose window is above the list: without a bound they overflow it.
  int64_t long_rows = 0;
  for (size_t row = 0; row < rows; ++row) {
    const int r = int(row / d.next_n), j = int(row % d.next_n);
    long_rows += winnow::paged_visible_keys(&d.context_lens[size_t(r)], d.next_n, j, false) > 4 * k;
  }
  const ops::PagedRunResult plain = ops::run_paged_on_device(*op, *f.ctx, d);
  REQUIRE(test::paged_wrong_rows(p, d, plain.indices) == 0);

  SECTION("exact: the same call's selection, no fallback row") {
    CHECK(run_hinted(*op, d, plain.indices).fallback_rows == 0);
    CHECK(run_hinted(*op, d, plain.indices, /*in_place=*/true).fallback_rows == 0);
  }
  SECTION("the previous step's selection on slightly changed queries") {
    ops::PagedHostData before = d;
    std::uniform_int_distribution<size_t> any(0, d.q.size() - 1);
    for (size_t i = 0; i < d.q.size() / 16; ++i) before.q[any(rng)] = d.q[any(rng)];
    const ops::PagedRunResult prev = ops::run_paged_on_device(*op, *f.ctx, before);
    run_hinted(*op, d, prev.indices);
    run_hinted(*op, d, prev.indices, /*in_place=*/true);
  }
  SECTION("stale: other rows' selections") {
    std::vector<int> h(plain.indices.size());
    for (size_t row = 0; row < rows; ++row)
      std::copy_n(&plain.indices[((row + 3) % rows) * k], k, &h[row * k]);
    run_hinted(*op, d, h);
  }
  SECTION("all -1: no bound, the long rows overflow and are counted") {
    const ops::PagedRunResult r = run_hinted(*op, d, std::vector<int>(plain.indices.size(), -1));
    CHECK(int64_t(r.fallback_rows) >= long_rows);
  }
  SECTION("duplicates, -1 entries, positions past the length or the causal limit") {
    const int kind = GENERATE(0, 1, 2, 3);
    INFO("kind " << kind);
    std::vector<int> h = plain.indices;
    std::uniform_int_distribution<int> slot(0, k - 1);
    for (size_t row = 0; row < rows; ++row) {
      int* b = &h[row * k];
      const int len = d.context_lens[row / d.next_n];
      switch (kind) {
        case 0: b[slot(rng)] = b[slot(rng)]; b[0] = b[k - 1]; break;
        case 1: b[slot(rng)] = -1; break;
        case 2: b[slot(rng)] = len + slot(rng); break;
        case 3: b[slot(rng)] = std::max(len - 1, 0); break;  // the last key: only query next_n - 1 sees it
      }
    }
    run_hinted(*op, d, h);
  }
}

TEST_CASE("paged decode hint: a graph captured with a hint replays as eager runs it",
          "[gpu][decode]") {
  // The output as its own hint (in place: each launch reads the one before it's output; the
  // replay's at smaller lengths, with many positions out of range), or an all -1 hint:
  // threshold 0, every key passes, the lists overflow (windows above the capacity of 4 k)
  // and every long row takes the radix rounds. Under capture those rounds sit in a
  // conditional node set after round 0's select (ops/paged/paged_stream.cpp): a replay
  // must run them where rows were sent back and skip them where none were, as eager does.
  WINNOW_REQUIRE_GPU();
  auto& f = test::GpuFixture::get();
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const bool all_minus_one = GENERATE(false, true);
  INFO((all_minus_one ? "all -1 hint" : "the output as the hint, in place"));
  auto p = hint_problem(2048, 2, 8, 256, false);
  p.arch = ops::device_arch(*f.ctx);
  const int max_len = int(test::sized(16384, 12000));
  ops::PagedDataOptions ties;
  ties.levels = all_minus_one ? 0 : 3;
  ops::PagedHostData d = ops::random_paged_data(p, std::vector<int>(8, max_len), rng, ties);
  auto op = ops::PagedTopkOp::create(p, f.ctx.get());
  op->build(*f.cache, *f.be);
  ops::PagedHint h;
  h.given = true;
  if (all_minus_one) {
    h.rows.assign(size_t(8 * p.next_n) * size_t(p.k), -1);
  } else {
    h.rows = ops::run_paged_on_device(*op, *f.ctx, d).indices;
    h.in_place = true;
  }
  std::vector<int> smaller = test::random_lens(8, max_len, rng);
  smaller[0] = 0;
  smaller[1] = 100;
  const ops::PagedGraphResult r = ops::run_paged_graph_on_device(*op, *f.ctx, d, smaller, h);
  CHECK(test::paged_wrong_rows(p, d, r.captured.indices) == 0);
  CHECK((r.captured.fallback_rows > 0) == all_minus_one);
  CHECK(r.replayed.indices == r.eager.indices);
  d.context_lens = smaller;
  CHECK(test::paged_wrong_rows(p, d, r.replayed.indices) == 0);
  CHECK(r.replayed.bad_windows == 0);
}
