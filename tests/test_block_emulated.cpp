// The block-select and block-sparse attention kernels' device code run on the CPU
// (tests/emu/cuda_emulation.h: a thread per CUDA thread, warp fragments exchanged by the
// PTX layouts) against the CPU reference: their indexing, fragment bookkeeping, masks and
// CSR output are checked here, before any GPU run. Tiny shapes: the emulation is slow
// (the d = 128 case takes minutes on two cores: hidden, run it by name:
// winnow_tests "*two score tiles*").
#include <cmath>

#include "block_check.h"
#include "testing/block_reference.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "block/block_attention_kernel.cuh"

using namespace winnow;

namespace {

template <int D>
struct EmuConfig {
  static constexpr int kHeads = 4, kKvHeads = 2, kDim = D;
  // 130: a block count that is not a multiple of 4, as the layout must allow.
  static constexpr int kThreads = 256, kTile = 64, kMaxBlocks = 130;
};

// The block score program dot(0) * (1 / sqrt(d)), as the generated functor computes it.
template <int D>
struct EmuScore {
  static float eval(const ScoreArgs& a) { return op_mul(a.dot[0], 1.0f / std::sqrt(float(D))); }
};

template <int D>
void run_emulated(int64_t L, ops::BlockInput kind, const ops::BlockSelectRule& rule) {
  using C = EmuConfig<D>;
  ops::BlockProblem prob = test::small_block_problem(C::kHeads, C::kKvHeads, L);
  prob.head_dim = D;
  const int64_t nb = ops::block_count(L);
  REQUIRE(nb <= C::kMaxBlocks);  // what the op's validation guarantees on the device
  const auto data = ops::make_block_data(prob, L, kind, test::test_seed() + uint64_t(L) + D);
  const ops::BlockHostInputs host = data.decoded();
  const size_t capacity = size_t(ops::index_capacity(prob, L));

  std::vector<uint16_t> pooled(size_t(C::kKvHeads) * nb * D);
  std::vector<int> staged(capacity), counts(size_t(C::kHeads * nb)), offsets(counts.size() + 1),
      indices(capacity, -1);
  std::vector<float> scores(capacity, -1.0f);
  BlockSelectParams p{};
  p.q = data.q.data();
  p.k = data.k.data();
  p.pooled = pooled.data();
  p.staged = staged.data();
  p.counts = counts.data();
  p.offsets = offsets.data();
  p.indices = indices.data();
  p.scores = scores.data();
  p.seq_len = int(L);
  p.blocks = int(nb);
  p.rule = {rule.alpha, rule.sink_blocks, rule.local_blocks, rule.last_blocks, rule.min_blocks, 0};
  std::vector<unsigned char> smem(size_t(BlockScoreSmem{D, C::kTile, C::kMaxBlocks, 8}.bytes()));
  winnow_emu::launch(unsigned(nb), C::kKvHeads, D, [&] { block_pool<C>(p); });
  winnow_emu::launch(unsigned(C::kHeads * nb), 1, C::kThreads,
                     [&] { block_score<C, EmuScore<D>>(p, smem.data()); });
  winnow_emu::launch(1, 1, 1024, [&] { block_offsets<C, 1024>(p); });
  winnow_emu::launch(unsigned(C::kHeads * nb), 1, 128, [&] { block_compact<C>(p); });

  // Pooled keys as the reference pools them.
  const std::vector<float> kbar = ops::reference_pooled_keys(prob, host);
  CHECK(ops::decode_bf16_codes(pooled) == kbar);
  // Scores within fp32 error of the reference, the index exactly the rule on them.
  const std::vector<double> ref = ops::reference_block_scores(prob, host);
  double worst = 0;
  for (size_t j = 0; j < capacity; ++j)
    worst = std::max(worst, std::fabs(scores[j] - ref[j]) / (1.0 + std::fabs(ref[j])));
  INFO("largest score error " << worst);
  CHECK(worst < 1e-4);
  ops::BlockIndex got;
  got.offsets = offsets;
  got.indices.assign(indices.begin(), indices.begin() + offsets.back());
  const ops::BlockIndex want = ops::build_block_index(prob, nb, scores.data(), rule);
  CHECK(got.offsets == want.offsets);
  CHECK(got.indices == want.indices);

  // Attention over that index against the reference restricted to it.
  std::vector<uint16_t> out(size_t(L) * C::kHeads * D, 0xFFFF);
  BlockAttentionParams a{};
  a.q = data.q.data();
  a.k = data.k.data();
  a.v = data.v.data();
  a.offsets = offsets.data();
  a.indices = indices.data();
  a.out = out.data();
  a.seq_len = int(L);
  a.blocks = int(nb);
  a.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  std::vector<unsigned char> att_smem(size_t(AttentionSmem{D, C::kTile}.bytes()));
  winnow_emu::launch(unsigned(C::kHeads * nb), 1, C::kThreads,
                     [&] { block_attention<C>(a, att_smem.data()); });
  const std::vector<float> result = ops::decode_bf16_codes(out);
  const std::vector<float> expect = ops::reference_block_attention(prob, host, got, 0, L);
  double worst_out = 0;
  const int64_t bad = test::attention_mismatches(result, expect, &worst_out);
  INFO("largest attention error " << worst_out);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("emulated block kernels equal the reference (d = 64)", "[emu]") {
  INFO("seed " << test::test_seed());
  ops::BlockSelectRule rule;
  rule.alpha = GENERATE(0.0f, 0.1f, 1.0f);
  rule.min_blocks = 2;
  INFO("alpha " << rule.alpha);
  run_emulated<64>(384, ops::BlockInput::Structured, rule);
}

TEST_CASE("emulated block kernels equal the reference (d = 128, two score tiles)", "[emu][.]") {
  INFO("seed " << test::test_seed());
  // 66 blocks: the score pass runs two tiles of 64; alpha 1 keeps about two blocks a row,
  // which keeps the emulated attention short.
  ops::BlockSelectRule rule;
  rule.alpha = 1.0f;
  rule.sink_blocks = 0;
  rule.local_blocks = 1;
  rule.min_blocks = 0;
  run_emulated<128>(128 * 66, ops::BlockInput::Random, rule);
}
