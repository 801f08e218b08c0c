// The sm_90a wgmma block-sparse attention kernel (templates/block/block_attention_wgmma.cuh) run
// on the CPU (tests/emu/cuda_emulation.h: the producer's TMA loads into the mbarrier
// ring, wgmma with both operands in shared memory and with A in registers and a transposed
// B, by the PTX ISA's layouts) against the CPU reference restricted to the same blocks.
// Tiny shapes: a few key blocks, structured and random input, selected, random and every
// visible block, d = 64 and 128. Also the emulated P V instruction alone against a plain
// product, and a wrong V layout caught.
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "block_check.h"
#include "testing/block_reference.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "block/block_attention_wgmma.cuh"

using namespace winnow;

namespace {

template <int D>
struct WgmmaConfig {
  static constexpr int kHeads = 4, kKvHeads = 2, kDim = D;
  static constexpr int kThreads = kWgmmaAttentionThreads, kTile = 128, kMaxBlocks = 128;
};

enum class Index { Selected, Random, Every };

ops::BlockIndex make_index(const ops::BlockProblem& prob, const ops::BlockHostInputs& host,
                           int64_t nb, Index kind, uint64_t seed) {
  if (kind == Index::Selected) {
    ops::BlockSelectRule rule;
    rule.alpha = 0.1f;
    rule.min_blocks = 2;
    const std::vector<double> scores = ops::reference_block_scores(prob, host);
    return ops::build_block_index(prob, nb, scores.data(), rule);
  }
  // Ascending lists with the diagonal block last, as block-select writes them; Random keeps
  // each earlier block with probability 1/2 (some rows only their diagonal).
  std::mt19937_64 rng(seed);
  ops::BlockIndex x;
  x.offsets.push_back(0);
  for (int h = 0; h < prob.heads; ++h) {
    for (int64_t I = 0; I < nb; ++I) {
      for (int64_t J = 0; J < I; ++J)
        if (kind == Index::Every || (rng() & 1)) x.indices.push_back(int(J));
      x.indices.push_back(int(I));
      x.offsets.push_back(int(x.indices.size()));
    }
  }
  return x;
}

// Runs the kernel and checks it against the reference; returns the output's bf16 codes.
template <class C>
std::vector<uint16_t> run_attention(int64_t L, ops::BlockInput input, Index kind) {
  constexpr int D = C::kDim;
  ops::BlockProblem prob = test::small_block_problem(C::kHeads, C::kKvHeads, L);
  prob.head_dim = D;
  const int64_t nb = ops::block_count(L);
  const uint64_t seed = test::test_seed() + uint64_t(L) + D + uint64_t(kind);
  const auto data = ops::make_block_data(prob, L, input, seed);
  const ops::BlockHostInputs host = data.decoded();
  const ops::BlockIndex index = make_index(prob, host, nb, kind, seed);

  std::vector<uint16_t> out(size_t(L) * C::kHeads * D, 0xFFFF);
  BlockAttentionParams a{};
  a.q = data.q.data();
  a.k = data.k.data();
  a.v = data.v.data();
  a.offsets = index.offsets.data();
  a.indices = index.indices.data();
  a.out = out.data();
  a.seq_len = int(L);
  a.blocks = int(nb);
  a.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  const int row_bytes = C::kKvHeads * D * 2;
  const TmaMap kmap = emu_key_tensor_map(data.k.data(), L, row_bytes, row_bytes, kBlockTokens);
  const TmaMap vmap = emu_key_tensor_map(data.v.data(), L, row_bytes, row_bytes, kBlockTokens);
  // The kernel moves registers from its producer warpgroup to the math ones (setmaxnreg):
  // model the pool, from the count each of the 384 threads gets at launch (168).
  winnow_emu::launch_regs = 65536 / C::kThreads / 8 * 8;
  std::vector<unsigned char> smem(size_t(WgmmaAttentionSmem{D}.bytes()) + 1024, 0xA5);
  unsigned char* base = smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
  winnow_emu::shared_window = base;
  winnow_emu::launch(unsigned(C::kHeads * nb), 1, C::kThreads,
                     [&] { block_attention_wgmma<C>(a, &kmap, &vmap, base); });
  winnow_emu::shared_window = nullptr;

  const std::vector<float> result = ops::decode_bf16_codes(out);
  const std::vector<float> expect = ops::reference_block_attention(prob, host, index, 0, L);
  double worst = 0;
  const int64_t bad = test::attention_mismatches(result, expect, &worst);
  INFO("kept blocks " << index.kept() << ", largest attention error " << worst);
  CHECK(bad == 0);
  return out;
}

// O (64 x 128) = P (64 x 128 keys, bf16, from each thread's registers in the A fragment
// order the kernel packs) V (128 keys x 128, [key][d], the TMA box layout written here by
// the swizzle rule) through wgmma_m64n_bf16_rs_mn, one warpgroup; `lbo`: the descriptor's
// leading byte offset (right: 128 x 128). Returns O by (row, column).
std::vector<float> emulated_pv(const std::vector<float>& P, const std::vector<float>& V, int lbo) {
  constexpr int T = 128, D = 128;
  std::vector<unsigned char> smem(2 * T * 128 + 1024, 0);
  unsigned char* base = smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
  for (int k = 0; k < T; ++k) {
    for (int n = 0; n < D; ++n) {
      // V's values are exact in bf16: the top half of the fp32 bits is the code.
      const uint16_t code = uint16_t(std::bit_cast<uint32_t>(V[size_t(k) * D + n]) >> 16);
      const int b = (n % 64) * 2;
      std::memcpy(base + (n / 64) * T * 128 + k * 128 + (((b >> 4) ^ (k & 7)) << 4) + (b & 15), &code, 2);
    }
  }
  std::vector<float> out(size_t(64) * D, 0.0f);
  winnow_emu::shared_window = base;
  winnow_emu::launch(1, 1, 128, [&] {
    const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5, g = lane >> 2, t4 = lane & 3;
    auto at = [&](int r, int k) { return P[size_t(16 * w + r) * T + k]; };
    float o[D / 2] = {};
    for (int ks = 0; ks < T / 16; ++ks) {
      const int k0 = 16 * ks + 2 * t4;
      const u32 pa[4] = {pack_bf16x2(at(g, k0), at(g, k0 + 1)), pack_bf16x2(at(g + 8, k0), at(g + 8, k0 + 1)),
                         pack_bf16x2(at(g, k0 + 8), at(g, k0 + 9)),
                         pack_bf16x2(at(g + 8, k0 + 8), at(g + 8, k0 + 9))};
      wgmma_m64n_bf16_rs_mn<D>(o, pa, wgmma_desc_mn(base + ks * 16 * 128, lbo), 1);
    }
    for (int i = 0; i < D / 2; ++i) {
      const int m = 16 * w + g + 8 * ((i >> 1) & 1), n = 8 * (i >> 2) + 2 * t4 + (i & 1);
      out[size_t(m) * D + n] = o[i];
    }
  });
  winnow_emu::shared_window = nullptr;
  return out;
}

}  // namespace

// The emulated instruction alone: the right descriptor gives the plain product, a wrong
// leading byte offset (the second 64 columns read from the wrong place) does not.
TEST_CASE("emulated wgmma with A in registers and a transposed B is the product", "[emu][block]") {
  constexpr int T = 128, D = 128;
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<float> P(size_t(64) * T), V(size_t(T) * D);
  for (float& x : P) x = float(small(rng)) / 8.0f;  // exact in bf16 and in fp32 sums
  for (float& x : V) x = float(small(rng)) / 4.0f;
  std::vector<float> want(size_t(64) * D, 0.0f);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < D; ++n)
      for (int k = 0; k < T; ++k) want[size_t(m) * D + n] += P[size_t(m) * T + k] * V[size_t(k) * D + n];
  CHECK(emulated_pv(P, V, T * 128) == want);
  const std::vector<float> wrong = emulated_pv(P, V, 1024);
  int64_t differ = 0;
  for (size_t j = 0; j < want.size(); ++j) differ += wrong[j] != want[j];
  CHECK(differ > 0);
}

TEST_CASE("emulated wgmma block attention equals the reference (d = 128)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  const auto input = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  const Index kind = GENERATE(Index::Selected, Index::Random, Index::Every);
  INFO("input " << int(input) << ", index " << int(kind));
  run_attention<WgmmaConfig<128>>(384, input, kind);
}

TEST_CASE("emulated wgmma block attention equals the reference (d = 64)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  const Index kind = GENERATE(Index::Selected, Index::Random);
  run_attention<WgmmaConfig<64>>(512, ops::BlockInput::Random, kind);
}
