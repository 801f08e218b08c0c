// The CPU reference itself: scores from the IR in double, and the top-k order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "testing/harness.h"
#include "testing/reference.h"
#include "support.h"
#include "topk_check.h"

using namespace winnow;

namespace {
ops::TopkProblem ip_problem(int k) { return test::single_head(ir::ip(), 16, k, ops::DType::F32); }
}  // namespace

TEST_CASE("select_topk_row: NaN first, ties by the smaller index, k > window", "[ref]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> s = {1, 3, nan, 3, -0.0f, 0.0f, nan, 2};
  CHECK(ops::select_topk_row(s.data(), 0, 8, 4) == std::vector<int64_t>{2, 6, 1, 3});
  CHECK(ops::select_topk_row(s.data(), 3, 6, 2) == std::vector<int64_t>{3, 4});
  CHECK(ops::select_topk_row(s.data(), 4, 6, 2) == std::vector<int64_t>{4, 5});
  CHECK(ops::select_topk_row(s.data(), 0, 3, 10).size() == 3);
  CHECK(ops::select_topk_row(s.data(), 5, 5, 3).empty());
}

TEST_CASE("select_topk_row equals a full sort on random ties", "[ref]") {
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<int> v(0, 7);
  std::vector<float> s(1000);
  for (auto& x : s) x = float(v(rng));
  std::vector<int64_t> idx(1000);
  for (int i = 0; i < 1000; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  idx.resize(100);
  CHECK(ops::select_topk_row(s.data(), 0, 1000, 100) == idx);
}

TEST_CASE("reference scores follow the IR in double", "[ref]") {
  ops::TopkProblem p = ip_problem(2);
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 3, 50, rng);
  ops::HostInputs h = d.host(p);
  double want = 0;
  for (int i = 0; i < 16; ++i) want += double(h.q[16 + i]) * h.k[7 * 16 + i];
  CHECK(ops::reference_score(p, h, 1, 7) == want);
  p.score = ir::l2();
  double l2 = 0;
  for (int i = 0; i < 16; ++i) l2 -= std::pow(double(h.q[16 + i]) - h.k[7 * 16 + i], 2);
  CHECK(ops::reference_score(p, h, 1, 7) == Approx(l2).epsilon(1e-9));
}

TEST_CASE("reference top-k honours the window and pads nothing itself", "[ref]") {
  ops::TopkProblem p = ip_problem(5);
  p.window = ops::WindowKind::Ranges;
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 2, 40, rng);
  d.window_start = {10, 3};
  d.window_end = {13, 3};
  ops::HostInputs h = d.host(p);
  auto top = ops::reference_topk_row(p, h, 0);
  REQUIRE(top.size() == 3);
  for (auto x : top) CHECK((x >= 10 && x < 13));
  CHECK(ops::reference_topk_row(p, h, 1).empty());
  d.window_end = {41, 3};
  h = d.host(p);
  CHECK(ops::row_window(p, h, 0).bad);
}

TEST_CASE("causal windows with ratio m", "[ref]") {
  ops::TopkProblem p = ip_problem(5);
  p.window = ops::WindowKind::Causal;
  p.causal_ratio = 4;
  p.causal_offset = 100;
  ops::HostInputs h;
  h.num_keys = 1000;
  CHECK(ops::row_window(p, h, 0).end == 25);   // (100 + 0 + 1) / 4
  CHECK(ops::row_window(p, h, 3).end == 26);   // (100 + 3 + 1) / 4
}

TEST_CASE("causal visible pairs in closed form equal the sum of the windows", "[ref]") {
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<int64_t> any(0, 5000);
  for (int t = 0; t < 200; ++t) {
    ops::TopkProblem p = ip_problem(5);
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = int(1 + any(rng) % 8);
    p.causal_offset = any(rng);
    const int64_t rows = 1 + any(rng) % 300;
    ops::HostInputs h;
    h.num_keys = (p.causal_offset + rows) / p.causal_ratio;  // the last row sees every key
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += double(ops::row_window(p, h, r).size());
    INFO("offset " << p.causal_offset << " rows " << rows << " m " << p.causal_ratio);
    REQUIRE(ops::causal_visible_pairs(p.causal_offset, rows, p.causal_ratio) == sum);
  }
  // csa-1m at S = 2^20, m = 4: about S^2 / 8 pairs (PERF.md).
  CHECK(ops::causal_visible_pairs(0, 1 << 20, 4) == Approx(double(1 << 20) * (1 << 20) / 8).epsilon(1e-5));
}

TEST_CASE("reference magnitudes: the score of |q k|, |w| and |kscale|", "[ref]") {
  ops::TopkProblem p = ip_problem(2);
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 3, 50, rng);
  ops::HostInputs h = d.host(p);
  double mag = 0, dot = 0;
  for (int i = 0; i < 16; ++i) {
    mag += std::abs(double(h.q[32 + i]) * h.k[5 * 16 + i]);
    dot += double(h.q[32 + i]) * h.k[5 * 16 + i];
  }
  CHECK(ops::reference_magnitude(p, h, 2, 5) == mag);
  CHECK(mag >= std::abs(dot));
  // The allowance: rel of the score (at least rel) plus 2^-14 of the magnitude.
  CHECK(ops::score_tolerance(p, h, 2, 5, dot, 1e-3) ==
        Approx(1e-3 * std::max(1.0, std::abs(dot)) + mag / 16384).epsilon(1e-12));
  // relu_mh: sum_h |w[h]| * relu(sum |q k|) * |kscale|, every head counting.
  ops::TopkProblem r;
  r.score = ir::relu_mh(true);
  r.heads = 2;
  r.head_dim = 16;
  r.q_dtype = r.k_dtype = ops::DType::F32;
  r.k = 1;
  ops::ProblemData rd = ops::random_problem(r, 2, 9, rng);
  ops::HostInputs rh = rd.host(r);
  double want = 0;
  for (int hd = 0; hd < 2; ++hd) {
    double m = 0;
    for (int i = 0; i < 16; ++i) m += std::abs(double(rh.q[(2 + hd) * 16 + i]) * rh.k[4 * 16 + i]);
    want += std::abs(double(rh.w[2 + hd])) * m;
  }
  want *= std::abs(double(rh.kscale[4]));
  CHECK(ops::reference_magnitude(r, rh, 1, 4) == Approx(want).epsilon(1e-12));
}

TEST_CASE("reference row scores equal the per-key scores, and near_reference_selection",
          "[ref]") {
  ops::TopkProblem p = test::relu_mh_problem(4, 10, ops::DType::BF16);
  p.head_dim = 32;
  p.window = ops::WindowKind::Causal;
  p.causal_ratio = 4;
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 400, 100, rng);
  const ops::HostInputs h = d.host(p);
  const int64_t row = 399;  // sees keys [0, 100)
  const std::vector<double> all = ops::reference_row_scores(p, h, row, 0, 100);
  for (int64_t key : {0, 17, 99}) CHECK(all[key] == ops::reference_score(p, h, row, key));
  const std::vector<double> mags = ops::reference_row_scores(p, h, row, 0, 100, true);
  CHECK(mags[17] == ops::reference_magnitude(p, h, row, 17));

  std::vector<int64_t> want = ops::reference_topk_row(p, h, row);
  REQUIRE(want.size() == 10);
  CHECK(ops::near_reference_selection(p, h, row, want));
  std::reverse(want.begin(), want.end());  // any order
  CHECK(ops::near_reference_selection(p, h, row, want));
  // The worst key instead of one of the best: far below the k-th score.
  const int64_t worst = std::min_element(all.begin(), all.end()) - all.begin();
  std::vector<int64_t> bad = want;
  bad[3] = worst;
  CHECK_FALSE(ops::near_reference_selection(p, h, row, bad));
  bad = want;
  bad.pop_back();  // too few
  CHECK_FALSE(ops::near_reference_selection(p, h, row, bad));
  bad = want;
  bad[0] = bad[1];  // a key twice
  CHECK_FALSE(ops::near_reference_selection(p, h, row, bad));
  bad = want;
  bad[0] = 100;  // outside the window
  CHECK_FALSE(ops::near_reference_selection(p, h, row, bad));
  // A row with fewer keys than k: all of them, nothing else.
  std::vector<int64_t> early = ops::reference_topk_row(p, h, 20);  // keys [0, 5)
  CHECK(early.size() == 5);
  CHECK(ops::near_reference_selection(p, h, 20, early));
}
