// block-select and block-sparse attention on the GPU against the CPU reference. Fresh
// random inputs on every run (the seed is printed).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "block_check.h"
#include "testing/block_harness.h"
#include "topk_check.h"

using namespace winnow;
using test::GpuFixture;

namespace {

struct BlockOps {
  std::unique_ptr<ops::BlockSelectOp> select;
  std::unique_ptr<ops::BlockAttentionOp> attention;
};

BlockOps build_block_ops(ops::BlockProblem p) {
  auto& f = GpuFixture::get();
  p.arch = ops::device_arch(*f.ctx);
  BlockOps o;
  o.select = ops::BlockSelectOp::create(p, f.ctx.get());
  o.select->build(*f.cache, *f.be);
  o.attention = ops::BlockAttentionOp::create(p, f.ctx.get());
  o.attention->build(*f.cache, *f.be);
  return o;
}

struct SelectRun {
  ops::BlockIndex index;
  std::vector<float> scores;
  ops::BlockIndexBuffers buffers;
};

SelectRun run_select(const ops::BlockSelectOp& op, const ops::BlockDeviceInputs& in,
                     const ops::BlockSelectRule& rule) {
  SelectRun r;
  r.buffers = ops::make_index_buffers(op, in.seq_len, true);
  ops::execute_block_select(op, in, rule, r.buffers, nullptr);
  rt::check(rt::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  r.index = ops::download_index(op.problem(), r.buffers);
  r.scores = ops::download_block_scores(op.problem(), r.buffers);
  return r;
}

// The row of (head, query block) of an index.
std::vector<int> index_row(const ops::BlockIndex& x, int64_t r) {
  return {x.indices.begin() + x.offsets[r], x.indices.begin() + x.offsets[r + 1]};
}

// Every row ascending, in [0, I], with its diagonal.
void check_form(const ops::BlockIndex& x, int heads, int64_t nb) {
  REQUIRE(x.offsets.size() == size_t(heads * nb + 1));
  CHECK(x.offsets[0] == 0);
  int64_t bad = 0;
  for (int64_t r = 0; r < heads * nb; ++r) {
    const std::vector<int> row = index_row(x, r);
    const int I = int(r % nb);
    const bool ok = !row.empty() && std::is_sorted(row.begin(), row.end()) &&
                    std::adjacent_find(row.begin(), row.end()) == row.end() && row.front() >= 0 &&
                    row.back() == I;
    bad += !ok;
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("block-select equals the CPU reference (structured and random input)", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int64_t L = GENERATE(128, 1024, 4096);
  const auto kind = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  const float alpha = GENERATE(0.05f, 0.1f, 0.3f);
  INFO("L " << L << " input " << ops::block_input_name(kind) << " alpha " << alpha);
  const auto p = test::small_block_problem(8, 2, 8192);
  auto o = build_block_ops(p);
  const auto data = ops::make_block_data(p, L, kind, test::test_seed() + uint64_t(L));
  const auto dev = ops::upload_block_inputs(data);
  ops::BlockSelectRule rule;
  rule.alpha = alpha;
  const SelectRun run = run_select(*o.select, dev, rule);
  const int64_t nb = ops::block_count(L);
  check_form(run.index, p.heads, nb);

  // 1. The device's fp32 block scores are the reference's within fp32 accumulation error.
  const std::vector<double> ref = ops::reference_block_scores(p, data.decoded());
  REQUIRE(run.scores.size() == ref.size());
  // fp32 dots, exp2 and sums of up to 128 rows against double: a few 1e-5 relative per row.
  auto tolerance = [](double score) { return 2e-3 + 2e-5 * std::fabs(score); };
  int64_t off = 0;
  double worst = 0;
  for (size_t j = 0; j < ref.size(); ++j) {
    const double err = std::fabs(run.scores[j] - ref[j]);
    worst = std::max(worst, err);
    off += !(err <= tolerance(ref[j]));
  }
  INFO("largest score error " << worst);
  CHECK(off == 0);

  // 2. The index is exactly the rule applied to the device's own scores.
  const ops::BlockIndex from_own = ops::build_block_index(p, nb, run.scores.data(), rule);
  CHECK(run.index.offsets == from_own.offsets);
  CHECK(run.index.indices == from_own.indices);

  // 3. Against the reference's scores, rows may differ only in blocks within the score
  // error of the threshold.
  const ops::BlockIndex from_ref = ops::build_block_index(p, nb, ref.data(), rule);
  int64_t differing = 0, unexplained = 0;
  for (int64_t r = 0; r < p.heads * nb; ++r) {
    const std::vector<int> a = index_row(run.index, r), b = index_row(from_ref, r);
    if (a == b) continue;
    ++differing;
    const int64_t h = r / nb, I = r % nb;
    const double* row = &ref[h * winnow::triangle(nb) + winnow::triangle(I)];
    const double top = *std::max_element(row, row + I + 1), threshold = alpha * top;
    std::vector<int> diff;
    std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
    for (int J : diff) unexplained += std::fabs(row[J] - threshold) > 2 * tolerance(top);
  }
  INFO(differing << " rows differ from the reference's index");
  CHECK(unexplained == 0);
  if (kind == ops::BlockInput::Random && L >= 1024) CHECK(run.index.density(p.heads, nb) > 0.9);
  if (kind == ops::BlockInput::Structured && L >= 4096) CHECK(run.index.density(p.heads, nb) < 0.5);
}

TEST_CASE("block-select ties: alpha 1 keeps every maximum, the budget takes smaller blocks",
          "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const auto p = test::small_block_problem(8, 2, 4096);
  auto o = build_block_ops(p);
  std::mt19937_64 rng(test::test_seed());
  const int64_t L = 4096, nb = 32;
  const auto data = test::tied_block_data(p, L, rng);
  const auto dev = ops::upload_block_inputs(data);
  const std::vector<double> ref = ops::reference_block_scores(p, data.decoded());
  ops::BlockSelectRule rule;
  rule.sink_blocks = GENERATE(0, 1);
  rule.local_blocks = GENERATE(1, 3);
  rule.min_blocks = GENERATE(0, 6);
  // 1: the maxima only; 0.95 and 0.88 sit between the levels' score ratios (e^(1/sqrt(128))
  // apart); 0: every block.
  rule.alpha = GENERATE(1.0f, 0.95f, 0.88f, 0.0f);
  INFO("alpha " << rule.alpha << " sinks " << rule.sink_blocks << " local " << rule.local_blocks
                << " min " << rule.min_blocks);
  const SelectRun run = run_select(*o.select, dev, rule);
  check_form(run.index, p.heads, nb);
  const ops::BlockIndex want = ops::build_block_index(p, nb, ref.data(), rule);
  CHECK(run.index.offsets == want.offsets);
  CHECK(run.index.indices == want.indices);
  if (rule.alpha == 0.0f) CHECK(run.index.kept() == p.heads * winnow::triangle(nb));
}

TEST_CASE("block-sparse attention equals attention restricted to the same blocks", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  // structured with the default rule; random with alpha 0 (dense); random with alpha 1 and
  // no sinks or budget (about two blocks per row: far from dense attention).
  const int which = GENERATE(0, 1, 2);
  const auto kind = which == 0 ? ops::BlockInput::Structured : ops::BlockInput::Random;
  ops::BlockSelectRule rule;
  if (which == 1) rule.alpha = 0.0f;
  if (which == 2) rule.alpha = 1.0f, rule.sink_blocks = 0, rule.local_blocks = 1, rule.min_blocks = 0;
  const int64_t L = 1024, nb = 8;
  INFO("input " << ops::block_input_name(kind) << " alpha " << rule.alpha);
  const auto p = test::small_block_problem(8, 2, 4096);
  auto o = build_block_ops(p);
  const auto data = ops::make_block_data(p, L, kind, test::test_seed() ^ 0x5eed);
  const ops::BlockHostInputs host = data.decoded();
  const auto dev = ops::upload_block_inputs(data);
  const SelectRun run = run_select(*o.select, dev, rule);
  auto out = ops::make_attention_output(p, L);
  ops::execute_block_attention(*o.attention, dev, run.buffers, out, nullptr);
  rt::check(rt::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  const std::vector<float> got = ops::download_attention(p, L, out);
  const std::vector<float> want = ops::reference_block_attention(p, host, run.index, 0, L);
  double worst = 0;
  int64_t bad = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    const double err = std::fabs(double(got[j]) - want[j]);
    worst = std::max(worst, err);
    bad += !(err <= 1e-2 + 1e-2 * std::fabs(want[j]));  // NaN counts as bad
  }
  INFO("largest error " << worst << ", density " << run.index.density(p.heads, nb));
  CHECK(bad == 0);
  if (which == 1) CHECK(run.index.kept() == p.heads * winnow::triangle(nb));
  if (which == 2) {
    // The same output is far from dense attention: the comparison above can fail.
    REQUIRE(run.index.density(p.heads, nb) < 0.6);
    ops::BlockIndex dense;
    dense.offsets.push_back(0);
    for (int64_t r = 0; r < p.heads * nb; ++r) {
      for (int J = 0; J <= int(r % nb); ++J) dense.indices.push_back(J);
      dense.offsets.push_back(int(dense.indices.size()));
    }
    const auto dense_out = ops::reference_block_attention(p, host, dense, 0, L);
    double gap = 0;
    for (size_t j = 0; j < dense_out.size(); ++j)
      gap = std::max(gap, std::fabs(double(got[j]) - dense_out[j]));
    CHECK(gap > 5e-2);
  }
}

TEST_CASE("block ops refuse bad tensors with messages", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  const auto p = test::small_block_problem(8, 2, 1024);
  auto o = build_block_ops(p);
  const auto data = ops::make_block_data(p, 1024, ops::BlockInput::Random, 1);
  auto dev = ops::upload_block_inputs(data);
  auto buffers = ops::make_index_buffers(*o.select, 1024, false);
  ops::BlockSelectRule rule;
  // L above max_seq_len.
  auto big = ops::make_block_data(p, 2048, ops::BlockInput::Random, 1);
  auto dev_big = ops::upload_block_inputs(big);
  CHECK_THROWS_WITH(ops::execute_block_select(*o.select, dev_big, rule, buffers, nullptr),
                    Catch::Contains("max_seq_len"));
  // A workspace too small.
  auto small = ops::make_index_buffers(*o.select, 1024, false);
  small.workspace = rt::DeviceBuffer(256);
  CHECK_THROWS_AS(ops::execute_block_select(*o.select, dev, rule, small, nullptr),
                  ops::WorkspaceTooSmall);
  // k with the wrong heads.
  const ops::TensorView bad_k =
      ops::contiguous_view(dev.k.data(), ops::DType::BF16, {1024, 4, 128});
  CHECK_THROWS_WITH(o.select->execute(dev.q_view(p), bad_k, rule, buffers.offsets_view(p),
                                      buffers.indices_view(p), nullptr, buffers.workspace.data(),
                                      buffers.workspace.size(), nullptr),
                    Catch::Contains("k: shape[1]"));
}

TEST_CASE("block-select and attention at PERF.md's shape: 32 query heads on 8 KV heads", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int64_t L = test::sized(8192, 2048), nb = L / 128;  // WINNOW_TEST_SMALL: 2048
  const auto p = test::small_block_problem(32, 8, L);
  auto o = build_block_ops(p);
  const auto data = ops::make_block_data(p, L, ops::BlockInput::Structured, test::test_seed() ^ 32);
  const ops::BlockHostInputs host = data.decoded();
  const auto dev = ops::upload_block_inputs(data);
  const ops::BlockSelectRule rule;  // the defaults
  const SelectRun run = run_select(*o.select, dev, rule);
  check_form(run.index, p.heads, nb);
  const ops::BlockIndex from_own = ops::build_block_index(p, nb, run.scores.data(), rule);
  CHECK(run.index.offsets == from_own.offsets);
  CHECK(run.index.indices == from_own.indices);
  const std::vector<double> ref = ops::reference_block_scores(p, host);
  double worst = 0;
  for (size_t j = 0; j < ref.size(); ++j)
    worst = std::max(worst, std::fabs(run.scores[j] - ref[j]) / (1.0 + std::fabs(ref[j])));
  CHECK(worst < 1e-4);
  INFO("density " << run.index.density(p.heads, nb));
  // The density bound holds at the full length (sink and local blocks weigh more in a
  // short one).
  if (!test::small_sizes()) CHECK(run.index.density(p.heads, nb) < 0.3);
  // Attention on the first and the last query block (the last holds the most keys).
  auto out = ops::make_attention_output(p, L);
  ops::execute_block_attention(*o.attention, dev, run.buffers, out, nullptr);
  rt::check(rt::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  const std::vector<float> got = ops::download_attention(p, L, out);
  for (int64_t first : {int64_t(0), L - 128}) {
    const std::vector<float> want =
        ops::reference_block_attention(p, host, run.index, first, first + 128);
    int64_t bad = 0;
    for (size_t j = size_t(first) * 32 * 128; j < size_t(first + 128) * 32 * 128; ++j)
      bad += !(std::fabs(double(got[j]) - want[j]) <= 1e-2 + 1e-2 * std::fabs(want[j]));
    INFO("rows from " << first);
    CHECK(bad == 0);
  }
}

// block-select with the wgmma score pass (BlockProblem::score_wgmma = 1, as
// WINNOW_BLOCK_SCORE_WGMMA=1) against the mma.sync one on the same inputs: the scores to
// fp32 rounding (the wgmma pass sums in another order and keeps a lazily moved row maximum:
// templates/block/block_score_wgmma.cuh), its index the rule on its own scores.
TEST_CASE("block-select's wgmma score pass equals the mma.sync one", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int d = GENERATE(128, 64);
  // 33 blocks: one partial tile; 130: two tiles of 128, the second partial.
  const int64_t L = GENERATE(int64_t(128), int64_t(33 * 128), int64_t(130 * 128));
  const auto kind = GENERATE(ops::BlockInput::Structured, ops::BlockInput::Random);
  INFO("d " << d << " L " << L << " input " << ops::block_input_name(kind));
  auto& f = GpuFixture::get();
  auto p = test::small_block_problem(32, 8, 130 * 128);
  p.head_dim = d;
  p.arch = ops::device_arch(*f.ctx);
  p.score_wgmma = 0;
  auto plain = ops::BlockSelectOp::create(p, f.ctx.get());
  plain->build(*f.cache, *f.be);
  p.score_wgmma = 1;
  auto wgmma = ops::BlockSelectOp::create(p, f.ctx.get());
  if (wgmma->plan_text().find("score_wgmma=1") == std::string::npos) {
    WARN("WINNOW_SKIP: the wgmma score pass is sm_90a only; this GPU is " << p.arch.str());
    return;
  }
  wgmma->build(*f.cache, *f.be);
  INFO(wgmma->launch_info());
  const auto data = ops::make_block_data(p, L, kind, test::test_seed() + uint64_t(L) + d);
  const auto dev = ops::upload_block_inputs(data);
  const int64_t nb = ops::block_count(L);
  for (const float alpha : {0.1f, 1.0f}) {
    ops::BlockSelectRule rule;
    rule.alpha = alpha;
    INFO("alpha " << alpha);
    const SelectRun a = run_select(*plain, dev, rule), b = run_select(*wgmma, dev, rule);
    check_form(b.index, p.heads, nb);
    REQUIRE(a.scores.size() == b.scores.size());
    int64_t differ = 0;
    double worst = 0;
    for (size_t j = 0; j < a.scores.size(); ++j) {
      const double e = std::fabs(double(a.scores[j]) - b.scores[j]) / (1.0 + std::fabs(a.scores[j]));
      differ += !(e <= 1e-4);  // NaN counts
      worst = std::max(worst, e);
    }
    INFO(differ << " of " << a.scores.size() << " scores differ by more than 1e-4 (1 + |s|); largest " << worst);
    CHECK(differ == 0);
    const ops::BlockIndex own = ops::build_block_index(p, nb, b.scores.data(), rule);
    CHECK(b.index.offsets == own.offsets);
    CHECK(b.index.indices == own.indices);
  }
  // Exact ties (d = 128 data): the reference's own index.
  if (d == 128 && L == 33 * 128) {
    std::mt19937_64 rng(test::test_seed());
    const auto tied = test::tied_block_data(p, L, rng);
    const auto tdev = ops::upload_block_inputs(tied);
    const std::vector<double> ref = ops::reference_block_scores(p, tied.decoded());
    ops::BlockSelectRule rule;
    rule.alpha = 1.0f;
    rule.min_blocks = 6;
    const SelectRun b = run_select(*wgmma, tdev, rule);
    const ops::BlockIndex want = ops::build_block_index(p, nb, ref.data(), rule);
    CHECK(b.index.offsets == want.offsets);
    CHECK(b.index.indices == want.indices);
  }
}
