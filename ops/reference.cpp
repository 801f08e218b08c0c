#include "ops/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "winnow/rank_order.cuh"

namespace winnow::ops {

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

namespace {

// score(row, key) in double; with `magnitudes`, of |w|, |kscale| and dot(h) = sum |q k|.
double evaluate(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key,
                bool magnitudes) {
  const int H = in.heads, D = in.dim;
  std::vector<double> dot(H), w(H), qsq(H);
  const float* kv = &in.k[key * D];
  double ksq = 0;
  for (int i = 0; i < D; ++i) ksq += double(kv[i]) * kv[i];
  for (int h = 0; h < H; ++h) {
    const float* qv = &in.q[(row * H + h) * D];
    double d = 0, s = 0;
    for (int i = 0; i < D; ++i) {
      d += magnitudes ? std::abs(double(qv[i]) * kv[i]) : double(qv[i]) * kv[i];
      s += double(qv[i]) * qv[i];
    }
    dot[h] = d;
    qsq[h] = s;
    w[h] = in.w.empty() ? 0.0 : in.w[row * H + h];
    if (magnitudes) w[h] = std::abs(w[h]);
  }
  ir::EvalInputs e;
  e.dot = dot.data();
  e.w = w.data();
  e.kscale = in.kscale.empty() ? 1.0 : in.kscale[key];
  if (magnitudes) e.kscale = std::abs(e.kscale);
  e.qsq = qsq.data();
  e.ksq = ksq;
  e.heads = H;
  const double v = ir::eval(p.score, e);
  return magnitudes ? std::abs(v) : v;
}

}  // namespace

double reference_score(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key) {
  return evaluate(p, in, row, key, false);
}

double reference_magnitude(const TopkProblem& p, const HostInputs& in, int64_t row,
                           int64_t key) {
  return evaluate(p, in, row, key, true);
}

double score_tolerance(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key,
                       double score, double rel) {
  const double mag = reference_magnitude(p, in, row, key);
  return rel * std::max(1.0, std::abs(score)) + kAccumulationError * (std::isfinite(mag) ? mag : 0);
}

std::vector<int64_t> reference_topk_row(const TopkProblem& p, const HostInputs& in, int64_t row) {
  const KeyWindow win = row_window(p, in, row);
  if (win.bad) return {};
  std::vector<double> score(win.size());
  for (int64_t i = 0; i < win.size(); ++i) score[i] = reference_score(p, in, row, win.start + i);
  std::vector<int64_t> idx(win.size());
  std::iota(idx.begin(), idx.end(), 0);
  // NaN first, then larger scores, then the smaller index; -0 == +0.
  auto better = [&](int64_t a, int64_t b) {
    const double x = score[a], y = score[b];
    const bool nx = std::isnan(x), ny = std::isnan(y);
    if (nx != ny) return nx;
    if (!nx && x != y) return x > y;
    return a < b;
  };
  const int64_t n = std::min<int64_t>(p.k, win.size());
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
  idx.resize(n);
  for (auto& i : idx) i += win.start;
  return idx;
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
