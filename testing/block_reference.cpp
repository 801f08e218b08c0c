#include "testing/block_reference.h"

#include <algorithm>
#include <cmath>

#include "common/element_decode.cuh"

namespace winnow::ops {

std::vector<float> reference_pooled_keys(const BlockProblem& p, const BlockHostInputs& in) {
  const int64_t nb = block_count(in.seq_len);
  const int d = p.head_dim, G = p.kv_heads;
  std::vector<float> out(size_t(G) * nb * d);
  for (int g = 0; g < G; ++g) {
    for (int64_t J = 0; J < nb; ++J) {
      for (int e = 0; e < d; ++e) {
        float acc = 0.0f;
        for (int t = 0; t < kBlockSize; ++t) acc += in.k[((J * kBlockSize + t) * G + g) * d + e];
        out[(g * nb + J) * d + e] =
            winnow::decode_bf16(winnow::encode_bf16(acc * (1.0f / kBlockSize)));
      }
    }
  }
  return out;
}

std::vector<double> reference_block_scores(const BlockProblem& p, const BlockHostInputs& in) {
  const int64_t nb = block_count(in.seq_len);
  const int d = p.head_dim, H = p.heads, group = p.heads / p.kv_heads;
  const std::vector<float> kbar = reference_pooled_keys(p, in);
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> out(size_t(H) * size_t(winnow::triangle(nb)), 0.0);
  std::vector<double> s(static_cast<size_t>(nb));
  for (int h = 0; h < H; ++h) {
    const int g = h / group;
    for (int64_t I = 0; I < nb; ++I) {
      double* row = &out[size_t(h * winnow::triangle(nb) + winnow::triangle(I))];
      for (int64_t i = I * kBlockSize; i < (I + 1) * kBlockSize; ++i) {
        const float* q = &in.q[(i * H + h) * d];
        double m = -INFINITY;
        for (int64_t J = 0; J <= I; ++J) {
          const float* kb = &kbar[(g * nb + J) * d];
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += double(q[e]) * double(kb[e]);
          s[J] = dot * scale;
          m = std::max(m, s[J]);
        }
        double z = 0;
        for (int64_t J = 0; J <= I; ++J) z += std::exp(s[J] - m);
        for (int64_t J = 0; J <= I; ++J) row[J] += std::exp(s[J] - m) / z;
      }
    }
  }
  return out;
}

template <class Score>
std::vector<int> select_blocks(const Score* row, int I, int blocks, const BlockSelectRule& r) {
  const int n = I + 1;
  Score mx = row[0];
  for (int J = 1; J < n; ++J) mx = std::max(mx, row[J]);
  const Score threshold = Score(r.alpha) * mx;
  std::vector<char> keep(size_t(n), 0);
  int kept = 0;
  for (int J = 0; J < n; ++J) {
    const bool must = J < r.sink_blocks || J > I - r.local_blocks || I >= blocks - r.last_blocks;
    keep[J] = must || row[J] >= threshold;
    kept += keep[J];
  }
  for (; kept < std::min(r.min_blocks, n); ++kept) {
    int best = -1;
    for (int J = 0; J < n; ++J) {
      if (!keep[J] && (best < 0 || row[J] > row[best])) best = J;  // ties: the first (smaller) J
    }
    keep[best] = 1;
  }
  std::vector<int> out;
  for (int J = 0; J < n; ++J) {
    if (keep[J]) out.push_back(J);
  }
  return out;
}
template std::vector<int> select_blocks(const float*, int, int, const BlockSelectRule&);
template std::vector<int> select_blocks(const double*, int, int, const BlockSelectRule&);

double BlockIndex::density(int heads, int64_t blocks) const {
  return double(kept()) / (double(heads) * double(winnow::triangle(blocks)));
}

template <class Score>
BlockIndex build_block_index(const BlockProblem& p, int64_t blocks, const Score* scores,
                             const BlockSelectRule& rule) {
  BlockIndex out;
  out.offsets.push_back(0);
  for (int h = 0; h < p.heads; ++h) {
    for (int64_t I = 0; I < blocks; ++I) {
      const Score* row = scores + h * winnow::triangle(blocks) + winnow::triangle(I);
      for (int J : select_blocks(row, int(I), int(blocks), rule)) out.indices.push_back(J);
      out.offsets.push_back(int(out.indices.size()));
    }
  }
  return out;
}
template BlockIndex build_block_index(const BlockProblem&, int64_t, const float*,
                                      const BlockSelectRule&);
template BlockIndex build_block_index(const BlockProblem&, int64_t, const double*,
                                      const BlockSelectRule&);

std::vector<float> reference_block_attention(const BlockProblem& p, const BlockHostInputs& in,
                                             const BlockIndex& index, int64_t row_begin,
                                             int64_t row_end) {
  const int64_t nb = block_count(in.seq_len);
  const int d = p.head_dim, H = p.heads, G = p.kv_heads, group = H / G;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<float> out(size_t(in.seq_len) * H * d, 0.0f);
  std::vector<double> w, acc(static_cast<size_t>(d));
  std::vector<int64_t> keys;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t I = i / kBlockSize;
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const int r = int(h * nb + I);
      keys.clear();
      for (int e = index.offsets[r]; e < index.offsets[r + 1]; ++e) {
        for (int t = 0; t < kBlockSize; ++t) {
          const int64_t key = int64_t(index.indices[e]) * kBlockSize + t;
          if (key <= i) keys.push_back(key);
        }
      }
      const float* q = &in.q[(i * H + h) * d];
      w.assign(keys.size(), 0.0);
      double m = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* k = &in.k[(keys[j] * G + g) * d];
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(q[e]) * double(k[e]);
        w[j] = dot * scale;
        m = std::max(m, w[j]);
      }
      double z = 0;
      for (double& x : w) z += (x = std::exp(x - m));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* v = &in.v[(keys[j] * G + g) * d];
        for (int e = 0; e < d; ++e) acc[e] += w[j] * double(v[e]);
      }
      for (int e = 0; e < d; ++e) out[(i * H + h) * d + e] = z > 0 ? float(acc[e] / z) : 0.0f;
    }
  }
  return out;
}

}  // namespace winnow::ops
