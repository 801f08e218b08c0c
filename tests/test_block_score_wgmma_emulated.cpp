// The sm_90a wgmma form of the block-select score pass (templates/block_score_wgmma.cuh)
// run on the CPU (tests/emu/cuda_emulation.h: the producer's TMA loads of the pooled keys
// into the mbarrier ring, wgmma from shared-memory descriptors, the named barriers) beside
// the mma.sync block_score on the same pooled keys: the block scores bit for bit, the CSR
// index exactly, and both against the CPU reference (scores within fp32 error, the index
// the rule on the kernel's scores; on tied data the reference's index itself). d = 128 and
// 64, causal, structured, random and tied input, tiles of 128 blocks (the plan's) and of 64
// (more than one tile, the last one partial).
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "block_check.h"
#include "testing/block_reference.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "winnow/block_score_wgmma.cuh"

using namespace winnow;

namespace {

constexpr int kMaxBlocks = 160;

// H query heads on G KV heads (4 on 2; 2 on 1 where the rows are long: the emulation's
// time goes by CTAs).
template <int D, int H, int G>
struct MmaConfig {
  static constexpr int kHeads = H, kKvHeads = G, kDim = D;
  static constexpr int kThreads = 256, kTile = 64, kMaxBlocks = ::kMaxBlocks;
};

template <int D, int T, int H, int G>
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

// block_pool, then the score pass (Tile 0: the mma.sync kernel; else the wgmma one with
// tiles of Tile blocks), block_offsets and block_compact, emulated.
template <int D, int Tile, int kHeads, int kKvHeads>
Selected run_select(const ops::BlockProblem& prob, const ops::BlockData& data,
                    const ops::BlockSelectRule& rule) {
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
  if constexpr (Tile == 0) {
    std::vector<unsigned char> smem(size_t(BlockScoreSmem{D, M::kTile, kMaxBlocks, 8}.bytes()));
    winnow_emu::launch(unsigned(kHeads * nb), 1, M::kThreads,
                       [&] { block_score<M, EmuScore<D>>(p, smem.data()); });
  } else {
    using C = WgmmaConfig<D, Tile, kHeads, kKvHeads>;
    // The pooled keys as the op's tensor map sees them: [kv_heads * nb rows][d * 2 bytes].
    const TmaMap map = emu_key_tensor_map(r.pooled.data(), kKvHeads * nb, D * 2, D * 2, Tile);
    std::vector<unsigned char> smem(size_t(WgmmaScoreSmem{D, Tile, kMaxBlocks}.bytes()) + 1024, 0xA5);
    unsigned char* base = smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
    winnow_emu::shared_window = base;
    winnow_emu::launch_regs = 0;  // no setmaxnreg
    winnow_emu::launch(unsigned(kHeads * nb), 1, C::kThreads,
                       [&] { block_score_wgmma<C, EmuScore<D>>(p, &map, base); });
    winnow_emu::shared_window = nullptr;
  }
  winnow_emu::launch(1, 1, 1024, [&] { block_offsets<M, 1024>(p); });
  winnow_emu::launch(unsigned(kHeads * nb), 1, 128, [&] { block_compact<M>(p); });
  r.indices.resize(size_t(r.offsets.back()));
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The wgmma pass (tiles of Tile) against the mma.sync pass and the reference. tied: the
// data have exact ties, so the index is also the reference's own.
template <int D, int Tile, int H = 4, int G = 2>
void check_wgmma_select(int64_t L, const ops::BlockData& data, const ops::BlockSelectRule& rule,
                        bool tied) {
  ops::BlockProblem prob = test::small_block_problem(H, G, L);
  prob.head_dim = D;
  const int64_t nb = ops::block_count(L);
  const Selected mma = run_select<D, 0, H, G>(prob, data, rule);
  const Selected wg = run_select<D, Tile, H, G>(prob, data, rule);
  CHECK(wg.pooled == mma.pooled);
  // 1. Bit for bit the mma.sync kernel's.
  int64_t differ = 0;
  for (size_t j = 0; j < wg.scores.size(); ++j) differ += std::memcmp(&wg.scores[j], &mma.scores[j], 4) != 0;
  INFO(differ << " of " << wg.scores.size() << " scores differ from the mma.sync kernel's in some bit");
  CHECK(same_bits(wg.scores, mma.scores));
  CHECK(wg.offsets == mma.offsets);
  CHECK(wg.indices == mma.indices);
  // 2. The reference: scores within fp32 error, the index the rule on the kernel's scores.
  const ops::BlockHostInputs host = data.decoded();
  const std::vector<double> ref = ops::reference_block_scores(prob, host);
  double worst = 0;
  for (size_t j = 0; j < ref.size(); ++j)
    worst = std::max(worst, std::fabs(wg.scores[j] - ref[j]) / (1.0 + std::fabs(ref[j])));
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

template <int D, int Tile, int H = 4, int G = 2>
void check_input(int64_t L, ops::BlockInput kind, const ops::BlockSelectRule& rule) {
  ops::BlockProblem prob = test::small_block_problem(H, G, L);
  prob.head_dim = D;
  const auto data = ops::make_block_data(prob, L, kind, test::test_seed() + uint64_t(L) + D);
  check_wgmma_select<D, Tile, H, G>(L, data, rule, false);
}

ops::BlockSelectRule rule_with(float alpha, int min_blocks) {
  ops::BlockSelectRule r;
  r.alpha = alpha;
  r.min_blocks = min_blocks;
  return r;
}

}  // namespace

TEST_CASE("emulated wgmma block scores equal the mma.sync kernel's bit for bit (d = 128)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  // Structured input at the default alpha, random at alpha 1 (the emulation's time: two).
  const auto [kind, alpha] = GENERATE(std::pair{ops::BlockInput::Structured, 0.1f},
                                      std::pair{ops::BlockInput::Random, 1.0f});
  INFO("input " << ops::block_input_name(kind) << " alpha " << alpha);
  // 7 blocks: one tile of 128, mostly past the row's blocks.
  check_input<128, kWgmmaScoreTile>(7 * 128, kind, rule_with(alpha, 2));
}

TEST_CASE("emulated wgmma block scores equal the mma.sync kernel's bit for bit (d = 64)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  const auto kind = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  INFO("input " << ops::block_input_name(kind));
  check_input<64, kWgmmaScoreTile>(6 * 128, kind, rule_with(0.1f, 3));
}

TEST_CASE("emulated wgmma block scores: tiles of 64 with the last one partial (d = 64)", "[emu][block]") {
  INFO("seed " << test::test_seed());
  // 67 blocks: rows of up to two tiles of 64 (the mma.sync kernel's tile too), the second
  // holding up to 3 blocks.
  check_input<64, 64, 2, 1>(67 * 128, ops::BlockInput::Random, rule_with(1.0f, 0));
}

TEST_CASE("emulated wgmma block scores: 130 blocks in two tiles of 128 (d = 128)", "[emu][block][.]") {
  INFO("seed " << test::test_seed());
  // Hidden (minutes on two cores): run by name. The second tile of the last rows holds 2.
  check_input<128, kWgmmaScoreTile, 2, 1>(130 * 128, ops::BlockInput::Structured, rule_with(0.1f, 4));
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
  check_wgmma_select<128, kWgmmaScoreTile>(L, data, rule, true);
}
