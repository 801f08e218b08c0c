// Shared checks of topk results for the [gpu] tests: fused == materialize + exact select
// (bit for bit), and fused == the CPU double reference on sampled rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "testing/harness.h"
#include "testing/reference.h"
#include "ops/common/backend_choice.h"
#include "ops/common/topk_op.h"
#include "support.h"
#include "select/rank_order.cuh"

namespace winnow::test {

// One process-wide context and kernel cache for the [gpu] tests.
struct GpuFixture {
  std::unique_ptr<rt::Context> ctx;
  std::unique_ptr<rt::CubinCache> cache;
  std::unique_ptr<backend::Backend> be;
  static GpuFixture& get() {
    static GpuFixture f = [] {
      GpuFixture g;
      g.ctx = std::make_unique<rt::Context>(0);
      // In memory, unless WINNOW_TEST_CACHE_DIR names a folder: then a second run of the
      // same build (a later visit to the GPU machine) loads the kernels the first compiled.
      std::optional<rt::DiskStore> disk;
      if (const char* dir = std::getenv("WINNOW_TEST_CACHE_DIR"); dir && *dir) disk.emplace(dir);
      g.cache = std::make_unique<rt::CubinCache>(std::move(disk));
      g.be = ops::choose_backend(nullptr);  // WINNOW_BACKEND=llvm runs them on LLVM's cubins
      return g;
    }();
    return f;
  }
  std::unique_ptr<ops::TopkOp> build(ops::TopkProblem p) {
    p.arch = ops::device_arch(*ctx);
    auto op = ops::TopkOp::create(p, ctx.get());
    op->build(*cache, *be);
    return op;
  }
};

// The selected key indices of one row (absolute), -1 padding removed.
inline std::vector<int64_t> row_indices(const ops::TopkProblem& p, const ops::RunResult& r,
                                        const ops::KeyWindow& w, int64_t row) {
  std::vector<int64_t> out;
  for (int i = 0; i < p.k; ++i) {
    int v = r.indices[row * p.k + i];
    if (v < 0) continue;
    out.push_back(p.absolute_indices ? v : v + w.start);
  }
  return out;
}

// A reported score as the kernel ranked it: WINNOW_OUTPUT_DISTANCE plans report -score
// (NaN stays NaN), so the checks below undo the negation before comparing.
inline float ranked_score(const ops::TopkProblem& p, float reported) {
  return p.negate_scores && reported == reported ? -reported : reported;
}

// Checks every row of a fused result against the materialized scores: the same index
// set (the same order when sorted), the -1 padding, and the same score bits.
inline void check_against_materialize(const ops::TopkProblem& p, const ops::ProblemData& d,
                                      const ops::RunResult& fused, const ops::RunResult& mat) {
  const ops::HostInputs host = d.host(p);
  int64_t bad_rows = 0;
  for (int64_t row = 0; row < d.rows; ++row) {
    const ops::KeyWindow w = ops::row_window(p, host, row);
    std::vector<int64_t> want;
    if (!w.bad) want = ops::select_topk_row(&mat.scores[row * d.num_keys], w.start, w.end, p.k);
    std::vector<int64_t> got = row_indices(p, fused, w, row);
    const int64_t base = p.absolute_indices ? 0 : w.start;
    bool ok = w.bad || ops::same_selection(&fused.indices[row * p.k], p.k, base,
                                           &mat.scores[row * d.num_keys], w.start, w.end);
    // Padding: exactly k - n slots of -1, at the end.
    int pads = 0;
    for (int i = 0; i < p.k; ++i) pads += fused.indices[row * p.k + i] < 0;
    ok = ok && pads == p.k - int64_t(want.size());
    for (int i = 0; i < int(want.size()) && ok; ++i) ok = fused.indices[row * p.k + i] >= 0;
    if (p.sorted) {
      ok = ok && got == want;  // rank order
    } else {
      ok = ok && std::is_sorted(got.begin(), got.end());  // unsorted output: index order
    }
    // Scores: the same bits as the materialized ones (-0 and NaN payloads canonical).
    for (int i = 0; i < int(got.size()) && ok; ++i) {
      float fs = fused.scores[row * p.k + i];
      float ms = mat.scores[row * d.num_keys + got[i]];
      ok = order_key(ranked_score(p, fs)) == order_key(ms);
    }
    // Padding scores: -inf, or +inf where the plan reports distances.
    const float pad = p.negate_scores ? INFINITY : -INFINITY;
    for (int i = int(want.size()); i < p.k && ok && !fused.scores.empty(); ++i)
      ok = fused.scores[row * p.k + i] == pad;
    if (!ok && bad_rows++ < 3) {
      UNSCOPED_INFO("row " << row << " window [" << w.start << ", " << w.end << ") got "
                           << got.size() << " keys, want " << want.size());
    }
  }
  CHECK(bad_rows == 0);
}

// Checks sampled rows against the CPU double reference. With exact data (integer
// levels) the index sets must be equal; otherwise a key may differ only where the
// reference scores of the swapped keys are within `tol` of the k-th score (plus the
// accumulation allowance of ops::score_tolerance).
inline void check_against_reference(const ops::TopkProblem& p, const ops::ProblemData& d,
                                    const ops::RunResult& fused, const std::vector<int64_t>& rows,
                                    bool exact_data, double tol = 1e-3) {
  const ops::HostInputs host = d.host(p);
  for (int64_t row : rows) {
    const ops::KeyWindow w = ops::row_window(p, host, row);
    std::vector<int64_t> want = ops::reference_topk_row(p, host, row);
    std::vector<int64_t> got = row_indices(p, fused, w, row);
    INFO("row " << row << " window [" << w.start << ", " << w.end << ")");
    REQUIRE(got.size() == want.size());
    std::set<int64_t> g(got.begin(), got.end()), r(want.begin(), want.end());
    if (exact_data) {
      CHECK(g == r);
      continue;
    }
    if (want.empty()) continue;
    const double kth = ops::reference_score(p, host, row, want.back());
    for (int64_t x : got) {
      if (r.count(x)) continue;
      double s = ops::reference_score(p, host, row, x);
      INFO("key " << x << " chosen, reference score " << s << ", k-th " << kth);
      CHECK(std::abs(s - kth) <= ops::score_tolerance(p, host, row, x, kth, tol) +
                                     ops::score_tolerance(p, host, row, want.back(), kth, 0));
    }
    // Returned scores (when the run asked for them) match the reference within
    // ops::score_tolerance.
    for (int i = 0; i < int(got.size()) && !fused.scores.empty(); ++i) {
      double s = ops::reference_score(p, host, row, got[i]);
      float f = ranked_score(p, fused.scores[row * p.k + i]);
      if (std::isnan(s)) {
        CHECK(std::isnan(f));
      } else if (std::isinf(s)) {
        CHECK(f == s);
      } else {
        CHECK(std::abs(f - s) <= ops::score_tolerance(p, host, row, got[i], s, tol));
      }
    }
  }
}

// Problems and the run-both-ways check of the [gpu] topk tests.
inline ops::TopkProblem relu_mh_problem(int heads, int k, ops::DType t) {
  ops::TopkProblem p;
  p.score = ir::relu_mh(true);
  p.heads = heads;
  p.head_dim = 128;
  p.q_dtype = t;
  p.k_dtype = t;
  p.k = k;
  return p;
}

// The windows of the top-k kernel's path for windows within k (an index-only call selects
// every key of each): d's range windows cut to at most k keys, row 0 exactly k keys from
// `first`, row 1 empty, row 2 running one key past the keys (a bad window: all -1).
// Returns each row's expected count of real indices.
inline std::vector<int> windows_within_k(ops::ProblemData& d, int k, int first) {
  for (size_t r = 0; r < d.window_start.size(); ++r)
    d.window_end[r] = std::min(d.window_end[r], d.window_start[r] + k);
  d.window_start[0] = first, d.window_end[0] = first + k;
  d.window_start[1] = first, d.window_end[1] = first;
  d.window_start[2] = int(d.num_keys) - 10, d.window_end[2] = int(d.num_keys) + 1;
  std::vector<int> len;
  for (size_t r = 0; r < d.window_start.size(); ++r) len.push_back(r == 2 ? 0 : d.window_end[r] - d.window_start[r]);
  return len;
}

inline ops::TopkProblem single_head(ir::Expr score, int dim, int k, ops::DType t) {
  ops::TopkProblem p;
  p.score = std::move(score);
  p.heads = 1;
  p.head_dim = dim;
  p.q_dtype = t;
  p.k_dtype = t;
  p.k = k;
  return p;
}

// Runs the fused op and the materialize op on the same data and checks both ways.
// `shape` (optional) reworks the random data first (e.g. sets the sample hint).
inline ops::RunResult run_and_check(ops::TopkProblem p, int64_t rows, int64_t keys,
                                    const ops::DataOptions& opt, std::vector<int64_t> ref_rows,
                                    bool exact_data,
                                    const std::function<void(ops::ProblemData&)>& shape = {}) {
  auto& f = GpuFixture::get();
  std::mt19937_64 rng(test_seed() ^ (uint64_t(rows) * 1315423911u + keys + p.k));
  ops::ProblemData d = ops::random_problem(p, rows, keys, rng, opt);
  if (shape) shape(d);
  auto fused = f.build(p);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  pm.negate_scores = false;  // materialize writes the scores themselves
  auto mat = f.build(pm);
  ops::RunResult rf = ops::run_on_device(*fused, *f.ctx, d);
  ops::RunResult rm = ops::run_on_device(*mat, *f.ctx, d);
  check_against_materialize(p, d, rf, rm);
  if (ref_rows.empty()) {
    for (int64_t r = 0; r < rows; ++r) ref_rows.push_back(r);
  }
  check_against_reference(p, d, rf, ref_rows, exact_data);
  return rf;
}

}  // namespace winnow::test
