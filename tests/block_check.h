// Shared pieces of the block-select tests: small problems and the data with exact ties.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "testing/block_data.h"
#include "testing/host_data.h"
#include "support.h"

namespace winnow::test {

inline ops::BlockProblem small_block_problem(int heads, int kv_heads, int64_t max_seq_len) {
  ops::BlockProblem p;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = 128;
  p.max_seq_len = max_seq_len;
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

// Exact ties: every query is e_0 and every key of block J of KV head g is level(g, J) e_0
// with a level in {0, 1, 2, 3}, so the pooled keys are exact and blocks of one level have
// bit-equal scores on the device and in the reference; v ~ N(0, 1).
inline ops::BlockData tied_block_data(const ops::BlockProblem& p, int64_t seq_len,
                                      std::mt19937_64& rng) {
  const int d = p.head_dim, H = p.heads, G = p.kv_heads;
  const int64_t nb = ops::block_count(seq_len);
  std::uniform_int_distribution<int> level(0, 3);
  std::vector<float> q(size_t(seq_len) * H * d, 0.0f), k(size_t(seq_len) * G * d, 0.0f);
  for (int64_t i = 0; i < seq_len; ++i)
    for (int h = 0; h < H; ++h) q[(i * H + h) * d] = 1.0f;
  for (int g = 0; g < G; ++g) {
    for (int64_t J = 0; J < nb; ++J) {
      const float c = float(level(rng));
      for (int t = 0; t < ops::kBlockSize; ++t) k[((J * ops::kBlockSize + t) * G + g) * d] = c;
    }
  }
  auto codes = [](std::vector<float> v) {
    ops::HostTensor t = ops::make_tensor(ops::DType::BF16, std::move(v));
    std::vector<uint16_t> out(t.count());
    std::memcpy(out.data(), t.bytes.data(), out.size() * 2);
    return out;
  };
  ops::BlockData data;
  data.seq_len = seq_len;
  data.q = codes(std::move(q));
  data.k = codes(std::move(k));
  data.v = ops::make_block_data(p, seq_len, ops::BlockInput::Random, rng()).v;
  return data;
}

// Elements of `got` (an attention output) farther from `want` than bf16 output allows:
// 1e-2 + 1e-2 |want|; the largest error into *worst.
inline int64_t attention_mismatches(const std::vector<float>& got, const std::vector<float>& want,
                                    double* worst) {
  int64_t bad = 0;
  *worst = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    const double err = std::fabs(double(got[j]) - want[j]);
    *worst = std::max(*worst, err);
    bad += !(err <= 1e-2 + 1e-2 * std::fabs(want[j]));
  }
  return bad;
}

}  // namespace winnow::test
