#include "testing/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "select/rank_order.cuh"

namespace winnow::ops {
namespace {

// The k best of scores (key start + i has score[i]), best first: NaN first, then larger
// scores, then the smaller index; -0 == +0.
std::vector<int64_t> best_keys(const std::vector<double>& score, int64_t start, int k) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int64_t a, int64_t b) {
    const double x = score[a], y = score[b];
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx != ny) return nx;
    if (!nx && x != y) return x > y;
    return a < b;
  };
  const int64_t n = std::min<int64_t>(k, int64_t(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
  idx.resize(n);
  for (auto& i : idx) i += start;
  return idx;
}

}  // namespace

KeyWindow row_window(const TopkProblem& p, const HostInputs& in, int64_t row) {
  KeyWindow w;
  switch (p.window) {
    case WindowKind::Dense:
      w.end = in.num_keys;
      break;
    case WindowKind::Ranges: {
      int64_t a = in.window_start[row], b = in.window_end[row];
      if (a < 0 || b > in.num_keys || a > b) {
        w.bad = true;
      } else {
        w.start = a;
        w.end = b;
      }
      break;
    }
    case WindowKind::Causal:
      w.end = std::min<int64_t>((p.causal_offset + row + 1) / p.causal_ratio, in.num_keys);
      break;
  }
  return w;
}

double causal_visible_pairs(int64_t causal_offset, int64_t rows, int causal_ratio) {
  // sum_{p = offset + 1 .. offset + rows} floor(p / m) = F(offset + rows) - F(offset), where
  // F(n) = sum_{p=1..n} floor(p / m) = m q (q - 1) / 2 + q (r + 1) for n = q m + r.
  const double m = causal_ratio;
  auto F = [&](int64_t n) {
    const double q = double(n / causal_ratio), r = double(n % causal_ratio);
    return m * q * (q - 1) / 2 + q * (r + 1);
  };
  return F(causal_offset + rows) - F(causal_offset);
}

double reference_score(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key) {
  return reference_row_scores(p, in, row, key, key + 1)[0];
}

double reference_magnitude(const TopkProblem& p, const HostInputs& in, int64_t row,
                           int64_t key) {
  return reference_row_scores(p, in, row, key, key + 1, true)[0];
}

double score_tolerance(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key,
                       double score, double rel) {
  const double mag = reference_magnitude(p, in, row, key);
  return rel * std::max(1.0, std::abs(score)) + kAccumulationError * (std::isfinite(mag) ? mag : 0);
}

std::vector<double> reference_row_scores(const TopkProblem& p, const HostInputs& in, int64_t row,
                                         int64_t start, int64_t end, bool magnitudes) {
  const int H = in.heads, D = in.dim;
  const ir::Uses u = ir::uses(p.score);
  // q transposed to [d][H]: one pass over the key updates H independent dots, each summed
  // over d in order.
  std::vector<double> qt(size_t(D) * H), w(H), qsq(H), dot(H);
  for (int h = 0; h < H; ++h) {
    const float* qv = &in.q[(row * H + h) * D];
    double s = 0;
    for (int i = 0; i < D; ++i) {
      qt[size_t(i) * H + h] = magnitudes ? std::abs(double(qv[i])) : double(qv[i]);
      s += double(qv[i]) * qv[i];
    }
    qsq[h] = s;
    w[h] = in.w.empty() ? 0.0 : in.w[row * H + h];
    if (magnitudes) w[h] = std::abs(w[h]);
  }
  ir::EvalInputs e;
  e.dot = dot.data();
  e.w = w.data();
  e.qsq = qsq.data();
  e.heads = H;
  std::vector<double> out(size_t(std::max<int64_t>(end - start, 0)));
  for (int64_t key = start; key < end; ++key) {
    const float* kv = &in.k[key * D];
    std::fill(dot.begin(), dot.end(), 0.0);
    double ksq = 0;
    for (int i = 0; i < D; ++i) {
      const double x = magnitudes ? std::abs(double(kv[i])) : double(kv[i]);
      const double* qi = &qt[size_t(i) * H];
      for (int h = 0; h < H; ++h) dot[h] += qi[h] * x;
      if (u.ksq) ksq += double(kv[i]) * kv[i];
    }
    e.kscale = in.kscale.empty() ? 1.0 : in.kscale[key];
    if (magnitudes) e.kscale = std::abs(e.kscale);
    e.ksq = ksq;
    if (u.ksq && !in.key_norms.empty())
      e.ksq = magnitudes ? std::abs(double(in.key_norms[key])) : double(in.key_norms[key]);
    const double v = ir::eval(p.score, e);
    out[key - start] = magnitudes ? std::abs(v) : v;
  }
  return out;
}

std::vector<int64_t> reference_topk_row(const TopkProblem& p, const HostInputs& in, int64_t row) {
  const KeyWindow win = row_window(p, in, row);
  if (win.bad) return {};
  return best_keys(reference_row_scores(p, in, row, win.start, win.end), win.start, p.k);
}

bool near_reference_selection(const TopkProblem& p, const HostInputs& in, int64_t row,
                              const std::vector<int64_t>& got, double tol) {
  const KeyWindow win = row_window(p, in, row);
  if (win.bad) return got.empty();
  const std::vector<double> score = reference_row_scores(p, in, row, win.start, win.end);
  const std::vector<int64_t> want = best_keys(score, win.start, p.k);
  if (got.size() != want.size()) return false;
  if (want.empty()) return true;
  const double kth = score[want.back() - win.start];
  std::vector<int64_t> picked = want;
  std::sort(picked.begin(), picked.end());
  for (int64_t key : got) {
    if (key < win.start || key >= win.end) return false;
    if (std::binary_search(picked.begin(), picked.end(), key)) continue;
    const double s = score[key - win.start];
    const double allowed = score_tolerance(p, in, row, key, kth, tol) +
                           score_tolerance(p, in, row, want.back(), kth, 0);
    if (!(std::abs(s - kth) <= allowed)) return false;
  }
  std::vector<int64_t> distinct = got;
  std::sort(distinct.begin(), distinct.end());
  return std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end();
}

std::vector<int64_t> select_topk_row(const float* scores, int64_t start, int64_t end, int k) {
  std::vector<u64> keys;
  keys.reserve(std::max<int64_t>(end - start, 0));
  for (int64_t s = start; s < end; ++s) keys.push_back(rank_key(order_key(scores[s]), int(s)));
  const int64_t n = std::min<int64_t>(k, keys.size());
  std::partial_sort(keys.begin(), keys.begin() + n, keys.end(), std::greater<u64>());
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = rank_key_index(keys[i]);
  return out;
}

bool same_selection(const int* fused_row, int k, int64_t base, const float* scores,
                    int64_t start, int64_t end) {
  std::vector<int64_t> want = select_topk_row(scores, start, end, k), got;
  for (int i = 0; i < k; ++i) {
    if (fused_row[i] >= 0) got.push_back(fused_row[i] + base);
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  return want == got;
}

}  // namespace winnow::ops
