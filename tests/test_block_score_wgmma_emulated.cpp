// The sm_90a wgmma form of the block-select score pass (templates/block/block_score_wgmma.cuh)
// run on the CPU (tests/emu/cuda_emulation.h: the TMA loads of the pooled keys into the
// mbarrier ring issued by the warp that releases a stage last, wgmma from shared-memory
// descriptors in both layouts of its two passes) beside the mma.sync block_score on the same
// pooled keys: the block scores within fp32 rounding of that kernel's (its sums run in
// another order), both against the CPU reference (within fp32 error), the CSR index the
// rule on the kernel's own scores (on tied data the reference's index itself). d = 128 and
// 64, causal, structured, random and tied input, one tile of 128 blocks (the last one
// partial) and, for the largest query blocks of 130, two.
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "block_check.h"
#include "testing/block_reference.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "block/block_score_wgmma.cuh"

using namespace winnow;

namespace {

constexpr int kMaxBlocks = 288;  // the three-tile case: 259 blocks

// H query heads on G KV heads (4 on 2; 2 on 1 where the rows are long: the emulation's
// time goes by CTAs).
template <int D, int H, int G>
struct MmaConfig {
  static constexpr int kHeads = H, kKvHeads = G, kDim = D;
  static constexpr int kThreads = 256, kTile = 64, kMaxBlocks = ::kMaxBlocks;
};

template <int D, int H, int G, int T = kWgmmaScoreTile>
struct WgmmaConfig {
  static constexpr int kHeads = H, kKvHeads = G, kDim = D;
  static constexpr int kThreads = kWgmmaScoreThreads, kTile = T, kMaxBlocks = ::kMaxBlocks;
};

// The block score program dot(0) * (1 / sqrt(d)), as the generated functor computes it.
template <int D>
struct EmuScore {
  static float eval(const ScoreArgs& a) { return op_mul(a.dot[0], 1.0f / std::sqrt(float(D))); }
};

struct Selected {
  std::vector<uint16_t> pooled;
  std::vector<float> scores;
  std::vector<int> offsets, indices;
};

// block_pool, then the score pass (the wgmma one, or the mma.sync kernel), block_offsets and
// block_compact, emulated. rows > 0: the score pass of the first `rows` CTAs only (the
// largest query blocks), no index (the CTAs' time is the emulation's).
template <int D, bool kWgmma, int kHeads, int kKvHeads>
Selected run_select(const ops::BlockProblem& prob, const ops::BlockData& data,
                    const ops::BlockSelectRule& rule, int rows = 0) {
  const int64_t L = data.seq_len, nb = ops::block_count(L);
  REQUIRE(nb <= kMaxBlocks);  // what the op's validation guarantees on the device
  const size_t capacity = size_t(ops::index_capacity(prob, L));
  Selected r;
  r.pooled.assign(size_t(kKvHeads) * nb * D, 0);
  r.scores.assign(capacity, -1.0f);
  r.offsets.assign(size_t(kHeads * nb + 1), 0);
  r.indices.assign(capacity, -1);
  std::vector<int> staged(capacity), counts(size_t(kHeads * nb));
  BlockSelectParams p{};
  p.q = data.q.data();
  p.k = data.k.data();
  p.pooled = r.pooled.data();
  p.staged = staged.data();
  p.counts = counts.data();
  p.offsets = r.offsets.data();
  p.indices = r.indices.data();
  p.scores = r.scores.data();
  p.seq_len = int(L);
  p.blocks = int(nb);
  p.rule = {rule.alpha, rule.sink_blocks, rule.local_blocks, rule.last_blocks, rule.min_blocks, 0};
  using M = MmaConfig<D, kHeads, kKvHeads>;
  winnow_emu::launch(unsigned(nb), kKvHeads, D, [&] { block_pool<M>(p); });
  const unsigned ctas = rows > 0 ? unsigned(rows) : unsigned(kHeads * nb);
  if constexpr (!kWgmma) {
    std::vector<unsigned char> smem(size_t(BlockScoreSmem{D, M::kTile, kMaxBlocks, 8}.bytes()));
    winnow_emu::launch(ctas, 1, M::kThreads, [&] { block_score<M, EmuScore<D>>(p, smem.data()); });
  } else {
    using C = WgmmaConfig<D, kHeads, kKvHeads>;
    // The pooled keys as the op's tensor map sees them: [kv_heads * nb rows][d * 2 bytes].
    const TmaMap map = emu_key_tensor_map(r.pooled.data(), kKvHeads * nb, D * 2, D * 2, C::kTile);
    std::vector<unsigned char> smem(size_t(WgmmaScoreSmem{D, C::kTile, kMaxBlocks}.bytes()) + 1024, 0xA5);
    unsigned char* base = smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
    winnow_emu::shared_window = base;
    winnow_emu::launch_regs = 0;  // no setmaxnreg
    winnow_emu::launch(ctas, 1, C::kThreads,
                       [&] { block_score_wgmma<C, EmuScore<D>>(p, &map, base); });
    winnow_emu::shared_window = nullptr;
  }
  if (rows > 0) return r;
  winnow_emu::launch(1, 1, 1024, [&] { block_offsets<M, 1024>(p); });
  winnow_emu::launch(unsigned(kHeads * nb), 1, 128, [&] { block_compact<M>(p); });
  r.indices.resize(size_t(r.offsets.back()));
  return r;
}

// The largest difference of a and b relative to 1 + |b| (0 where both are the unwritten -1).
double worst_difference(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t j = 0; j < b.size(); ++j) worst = std::max(worst, std::fabs(a[j] - b[j]) / (1.0 + std::fabs(b[j])));
  return worst;
}

// The wgmma pass against the mma.sync pass and the reference. tied: the data have exact
// ties, so the index is also the reference's own.
template <int D, int H = 4, int G = 2>
void check_wgmma_select(int64_t L, const ops::BlockData& data, const ops::BlockSelectRule& rule,
                        bool tied) {
  ops::BlockProblem prob = test::small_block_problem(H, G, L);
  prob.head_dim = D;
  const int64_t nb = ops::block_count(L);
  const Selected mma = run_select<D, false, H, G>(prob, data, rule);
  const Selected wg = run_select<D, true, H, G>(prob, data, rule);
  CHECK(wg.pooled == mma.pooled);
  // 1. The mma.sync kernel's scores to fp32 rounding (sums of at most 128 terms of [0, 1]).
  const double vs_mma = worst_difference(wg.scores, std::vector<double>(mma.scores.begin(), mma.scores.end()));
  INFO("largest difference from the mma.sync kernel's scores " << vs_mma);
  CHECK(vs_mma < 2e-5);
  // 2. The reference: scores within fp32 error, the index the rule on the kernel's scores.
  const ops::BlockHostInputs host = data.decoded();
  const std::vector<double> ref = ops::reference_block_scores(prob, host);
  const double worst = worst_difference(wg.scores, ref);
  INFO("largest score error " << worst);
  CHECK(worst < 1e-4);
  const ops::BlockIndex own = ops::build_block_index(prob, nb, wg.scores.data(), rule);
  CHECK(wg.offsets == own.offsets);
  CHECK(wg.indices == own.indices);
  if (tied) {
    const ops::BlockIndex want = ops::build_block_index(prob, nb, ref.data(), rule);
    CHECK(wg.offsets == want.offsets);
    CHECK(wg.indices == want.indices);
  }
}

template <int D, int H = 4, int G = 2>
void check_input(int64_t L, ops::BlockInput kind, const ops::BlockSelectRule& rule) {
  ops::BlockProblem prob = test::small_block_problem(H, G, L);
  prob.head_dim = D;
  const auto data = ops::make_block_data(prob, L, kind, test::test_seed() + uint64_t(L) + D);
  check_wgmma_select<D, H, G>(L, data, rule, false);
}

ops::BlockSelectRule rule_with(float alpha, int min_blocks) {
  ops::BlockSelectRule r;
  r.alpha = alpha;
  r.min_blocks = min_blocks;
  return r;
}

}  // namespace

TEST_CASE("emulated wgmma block scores equal the mma.sync kernel's and the reference (d = 128)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  // Structured input at the default alpha, random at alpha 1 (the emulation's time: two).
  const auto [kind, alpha] = GENERATE(std::pair{ops::BlockInput::Structured, 0.1f},
                                      std::pair{ops::BlockInput::Random, 1.0f});
  INFO("input " << ops::block_input_name(kind) << " alpha " << alpha);
  // 7 blocks: one tile of 128, mostly past the row's blocks.
  check_input<128>(7 * 128, kind, rule_with(alpha, 2));
}

TEST_CASE("emulated wgmma block scores equal the mma.sync kernel's and the reference (d = 64)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  const auto kind = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  INFO("input " << ops::block_input_name(kind));
  check_input<64>(6 * 128, kind, rule_with(0.1f, 3));
}

namespace {

// The score pass of the largest two query blocks of both heads only (nb - 1 and nb - 2),
// with `nb` blocks at d = 64: the ring's stages reused, pass 1's reference moved across
// tiles, pass 2's blocks of the later tiles; against the mma.sync pass and the reference.
void check_largest_rows(int64_t nb, ops::BlockInput kind) {
  constexpr int H = 2, G = 1, D = 64;
  const int64_t L = nb * 128;
  ops::BlockProblem prob = test::small_block_problem(H, G, L);
  prob.head_dim = D;
  const auto data = ops::make_block_data(prob, L, kind, test::test_seed() + uint64_t(nb));
  const ops::BlockSelectRule rule = rule_with(0.1f, 4);
  const Selected mma = run_select<D, false, H, G>(prob, data, rule, 2 * H);
  const Selected wg = run_select<D, true, H, G>(prob, data, rule, 2 * H);
  const std::vector<double> ref = ops::reference_block_scores(prob, data.decoded());
  double vs_mma = 0, worst = 0;
  int64_t compared = 0;
  for (int h = 0; h < H; ++h) {
    for (int64_t I = nb - 2; I < nb; ++I) {
      const int64_t row = h * triangle(nb) + triangle(I);
      for (int64_t J = 0; J <= I; ++J, ++compared) {
        const double r = ref[size_t(row + J)], w = wg.scores[size_t(row + J)];
        vs_mma = std::max(vs_mma, std::fabs(w - mma.scores[size_t(row + J)]) / (1.0 + std::fabs(r)));
        worst = std::max(worst, std::fabs(w - r) / (1.0 + std::fabs(r)));
      }
    }
  }
  INFO(compared << " scores; largest difference from the mma.sync kernel's " << vs_mma
                << ", from the reference " << worst);
  CHECK(compared == H * (2 * nb - 1));
  CHECK(vs_mma < 2e-5);
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_CASE("emulated wgmma block scores: two tiles of 128, the second partial (d = 64)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  // 130 blocks: rows 129 and 128 hold two tiles, the second with 2 and 1 blocks.
  const auto kind = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  INFO("input " << ops::block_input_name(kind));
  check_largest_rows(130, kind);
}

TEST_CASE("emulated wgmma block scores over three tiles (the third partial)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  // 259 blocks: rows 258 and 257, the ring's stages reused across three tiles a pass.
  check_largest_rows(259, ops::BlockInput::Structured);
}

TEST_CASE("emulated wgmma block scores: 130 blocks in two tiles of 128 (d = 128)", "[emu][block][.]") {
  INFO("seed " << test::test_seed());
  // Hidden (minutes on two cores): run by name. The second tile of the last rows holds 2.
  check_input<128, 2, 1>(130 * 128, ops::BlockInput::Structured, rule_with(0.1f, 4));
}

TEST_CASE("emulated wgmma block scores: ties keep the reference's index", "[emu][block]") {
  INFO("seed " << test::test_seed());
  const int64_t L = 9 * 128;
  ops::BlockProblem prob = test::small_block_problem(4, 2, L);
  std::mt19937_64 rng(test::test_seed());
  const auto data = test::tied_block_data(prob, L, rng);
  // Rules of the [gpu] ties case (alpha: the maxima only, between the levels' score ratios,
  // every block), four of its combinations of sinks, local window and budget.
  struct Rule {
    float alpha;
    int sinks, local, min;
  };
  const Rule r = GENERATE(Rule{1.0f, 0, 1, 0}, Rule{1.0f, 1, 3, 6}, Rule{0.88f, 0, 1, 6},
                          Rule{0.0f, 1, 1, 0});
  ops::BlockSelectRule rule;
  rule.alpha = r.alpha;
  rule.sink_blocks = r.sinks;
  rule.local_blocks = r.local;
  rule.min_blocks = r.min;
  INFO("alpha " << rule.alpha << " sinks " << rule.sink_blocks << " local " << rule.local_blocks
                << " min " << rule.min_blocks);
  check_wgmma_select<128>(L, data, rule, true);
}

TEST_CASE("exp2 on the FMA pipe: within 2.2e-7 of exp2, 0 below 2^-126, NaN for NaN", "[emu][block]") {
  // exp2_poly (block_select_kernel.cuh) against the double exp2 at every 1/1024 from -126 to
  // 127 and random points between, where the index passes call it.
  std::mt19937_64 rng(test::test_seed());
  std::uniform_real_distribution<float> u(-126.0f, 127.0f);
  double worst = 0;
  int64_t checked = 0;
  const auto check = [&](float x) {
    const double want = std::exp2(double(x)), got = exp2_poly(x);
    worst = std::max(worst, std::fabs(got / want - 1.0));
    ++checked;
  };
  for (int i = -126 * 1024; i <= 127 * 1024; ++i) check(float(i) / 1024.0f);
  for (int i = 0; i < 1000000; ++i) check(u(rng));
  INFO(checked << " points, largest relative error " << worst);
  CHECK(worst < 2.2e-7);
  CHECK(exp2_poly(0.0f) == 1.0f);
  CHECK(exp2_poly(minus_infinity()) == 0.0f);
  CHECK(exp2_poly(-126.5f) == 0.0f);
  CHECK(exp2_poly(-1000.0f) == 0.0f);
  CHECK(std::isnan(exp2_poly(std::nanf(""))));
}
