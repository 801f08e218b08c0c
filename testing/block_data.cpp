#include "testing/block_data.h"

#include <cmath>
#include <random>

#include "testing/fast_fill.h"
#include "testing/host_data.h"
#include "common/element_decode.cuh"

namespace winnow::ops {

const char* block_input_name(BlockInput t) {
  return t == BlockInput::Random ? "random" : "structured";
}

std::vector<float> decode_bf16_codes(const std::vector<uint16_t>& codes) {
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = winnow::decode_bf16(codes[i]);
  return out;
}

BlockHostInputs BlockData::decoded() const {
  BlockHostInputs h;
  h.seq_len = seq_len;
  h.q = decode_bf16_codes(q);
  h.k = decode_bf16_codes(k);
  h.v = decode_bf16_codes(v);
  return h;
}

namespace {

// Adds `gain * u` to a row of bf16 codes.
void add_direction(uint16_t* row, const float* u, float gain, int d) {
  for (int e = 0; e < d; ++e)
    row[e] = winnow::encode_bf16(winnow::decode_bf16(row[e]) + gain * u[e]);
}

}  // namespace

BlockData make_block_data(const BlockProblem& p, int64_t seq_len, BlockInput kind,
                          uint64_t seed) {
  const int d = p.head_dim, H = p.heads, G = p.kv_heads, group = H / G;
  const int64_t nb = block_count(seq_len);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> samples(size_t(1) << 16);
  for (float& x : samples) x = normal(rng);
  const HostTensor table = make_tensor(DType::BF16, std::move(samples));
  const auto* codes = reinterpret_cast<const uint16_t*>(table.bytes.data());

  // The structure: u_g, and the key boost b of each (KV head, key block) (0: none).
  const bool structured = kind == BlockInput::Structured;
  std::vector<float> u(size_t(G) * d), boost(size_t(G) * nb, 0.0f);
  BlockData out;
  out.seq_len = seq_len;
  if (structured) {
    out.stripes.assign(size_t(G) * nb, 0);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f), gain(2.0f, 8.0f);
    const float per_gain = std::sqrt(float(d)) / 8.0f;  // b for a logit gain of 1
    for (int g = 0; g < G; ++g) {
      double norm = 0;
      for (int e = 0; e < d; ++e) norm += double(u[g * d + e] = normal(rng)) * u[g * d + e];
      for (int e = 0; e < d; ++e) u[g * d + e] = float(u[g * d + e] / std::sqrt(norm));
      boost[g * nb] = 8.0f * per_gain;
      out.stripes[g * nb] = 1;
      for (int64_t J = 1; J < nb; ++J) {
        if (unit(rng) < 1.0f / 16.0f) {
          boost[g * nb + J] = gain(rng) * per_gain;
          out.stripes[g * nb + J] = 1;
        }
      }
    }
  }
  out.q.resize(size_t(seq_len) * H * d);
  out.k.resize(size_t(seq_len) * G * d);
  out.v.resize(size_t(seq_len) * G * d);
  const size_t qb = size_t(kBlockSize) * H * d, kb = size_t(kBlockSize) * G * d;
  parallel_for(size_t(nb), [&](size_t J) {
    const uint64_t s = splitmix64(seed * 0x100000001B3ull + J);
    fill_chunk(&out.q[J * qb], qb, codes, splitmix64(s + 1));
    fill_chunk(&out.k[J * kb], kb, codes, splitmix64(s + 2));
    fill_chunk(&out.v[J * kb], kb, codes, splitmix64(s + 3));
    if (!structured) return;
    for (int t = 0; t < kBlockSize; ++t) {
      const size_t token = J * kBlockSize + t;
      for (int h = 0; h < H; ++h)
        add_direction(&out.q[(token * H + h) * d], &u[size_t(h / group) * d], 8.0f, d);
      for (int g = 0; g < G; ++g) {
        if (boost[g * nb + J] != 0.0f)
          add_direction(&out.k[(token * G + g) * d], &u[size_t(g) * d], boost[g * nb + J], d);
      }
    }
  });
  return out;
}

}  // namespace winnow::ops
