// The CPU reference of block-select: the rule on hand-made rows, the score invariants,
// and attention restricted to an index against plain causal attention. No GPU.
#include <cmath>
#include <numeric>

#include "block_check.h"
#include "testing/block_reference.h"

using namespace winnow;
using ops::BlockSelectRule;

namespace {

BlockSelectRule rule(float alpha, int sinks, int local, int last, int min_blocks) {
  BlockSelectRule r;
  r.alpha = alpha;
  r.sink_blocks = sinks;
  r.local_blocks = local;
  r.last_blocks = last;
  r.min_blocks = min_blocks;
  return r;
}

}  // namespace

TEST_CASE("the threshold rule on hand-made rows", "[ref]") {
  //                    J: 0    1    2    3    4    5    6    7    8    9
  const double row[10] = {5.0, 1.0, 9.0, 2.0, 9.0, 0.5, 3.0, 3.0, 1.0, 4.0};
  const int I = 9, nb = 20;
  // alpha = 0: every visible block.
  CHECK(ops::select_blocks(row, I, nb, rule(0.0f, 0, 1, 0, 0)).size() == 10);
  // alpha = 1: the maxima (both, a tie) and the must-keep blocks (sink 0, diagonal 9).
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 1, 1, 0, 0)) == std::vector<int>{0, 2, 4, 9});
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 0, 1, 0, 0)) == std::vector<int>{2, 4, 9});
  // alpha 0.5: 4.5 keeps 5.0, 9.0, 9.0; the diagonal (4.0) is kept as must-keep.
  CHECK(ops::select_blocks(row, I, nb, rule(0.5f, 0, 1, 0, 0)) == std::vector<int>{0, 2, 4, 9});
  // Local window of 3: blocks 7, 8, 9.
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 0, 3, 0, 0)) == std::vector<int>{2, 4, 7, 8, 9});
  // Budget of 6 from {2, 4, 9}: then 0 (5.0), then 6 and 7 tie at 3.0: the smaller, 6.
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 0, 1, 0, 5)) == std::vector<int>{0, 2, 4, 6, 9});
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 0, 1, 0, 6)) ==
        std::vector<int>{0, 2, 4, 6, 7, 9});
  // A budget above the visible blocks keeps them all.
  CHECK(ops::select_blocks(row, I, nb, rule(1.0f, 0, 1, 0, 50)).size() == 10);
  // The last query blocks are dense.
  CHECK(ops::select_blocks(row, I, 10, rule(1.0f, 0, 1, 1, 0)).size() == 10);
  CHECK(ops::select_blocks(row, I, 11, rule(1.0f, 0, 1, 1, 0)).size() == 3);
  // The first query block keeps its only block.
  CHECK(ops::select_blocks(row, 0, nb, rule(1.0f, 0, 1, 0, 4)) == std::vector<int>{0});
  // fp32 rows take the threshold in fp32.
  const float frow[3] = {1.0f, 0.1f, 1.0f};
  CHECK(ops::select_blocks(frow, 2, nb, rule(0.1f, 0, 1, 0, 0)) == std::vector<int>{0, 1, 2});
}

TEST_CASE("reference block scores: each row sums to 128, pooled keys are the bf16 mean", "[ref]") {
  INFO("seed " << test::test_seed());
  const auto p = test::small_block_problem(4, 2, 1024);
  const auto data = ops::make_block_data(p, 512, ops::BlockInput::Structured, test::test_seed());
  const ops::BlockHostInputs in = data.decoded();
  const std::vector<float> kbar = ops::reference_pooled_keys(p, in);
  // kbar[g = 1][J = 2][e = 5] by hand.
  float acc = 0.0f;
  for (int t = 0; t < 128; ++t) acc += in.k[((2 * 128 + t) * 2 + 1) * 128 + 5];
  CHECK(kbar[(1 * 4 + 2) * 128 + 5] == ops::decode_bf16_codes({ops::encode_bf16(acc / 128)})[0]);
  const std::vector<double> s = ops::reference_block_scores(p, in);
  const int64_t nb = 4;
  for (int h = 0; h < p.heads; ++h) {
    for (int64_t I = 0; I < nb; ++I) {
      const double* row = &s[h * winnow::triangle(nb) + winnow::triangle(I)];
      CHECK(std::accumulate(row, row + I + 1, 0.0) == Approx(128.0).epsilon(1e-9));
    }
  }
}

TEST_CASE("structured input gives the threshold something to find, random keeps nearly all",
          "[ref]") {
  INFO("seed " << test::test_seed());
  const auto p = test::small_block_problem(4, 2, 4096);
  BlockSelectRule r;  // the defaults: alpha 0.1
  const auto structured = ops::make_block_data(p, 4096, ops::BlockInput::Structured, test::test_seed());
  const auto s = ops::reference_block_scores(p, structured.decoded());
  const ops::BlockIndex idx = ops::build_block_index(p, 32, s.data(), r);
  CHECK(idx.density(p.heads, 32) < 0.5);
  // Every row keeps its sink and its diagonal.
  for (int h = 0; h < p.heads; ++h) {
    for (int I = 0; I < 32; ++I) {
      const int a = idx.offsets[h * 32 + I], b = idx.offsets[h * 32 + I + 1];
      REQUIRE(b > a);
      CHECK(idx.indices[a] == 0);
      CHECK(idx.indices[b - 1] == I);
    }
  }
  const auto random = ops::make_block_data(p, 4096, ops::BlockInput::Random, test::test_seed());
  const auto sr = ops::reference_block_scores(p, random.decoded());
  CHECK(ops::build_block_index(p, 32, sr.data(), r).density(p.heads, 32) > 0.9);
  r.alpha = 0.0f;
  CHECK(ops::build_block_index(p, 32, s.data(), r).density(p.heads, 32) == 1.0);
}

TEST_CASE("attention over the dense index is plain causal attention, a sparse one differs",
          "[ref]") {
  INFO("seed " << test::test_seed());
  const auto p = test::small_block_problem(4, 2, 512);
  const auto data = ops::make_block_data(p, 512, ops::BlockInput::Random, test::test_seed());
  const ops::BlockHostInputs in = data.decoded();
  const std::vector<double> s = ops::reference_block_scores(p, in);
  BlockSelectRule dense_rule;
  dense_rule.alpha = 0.0f;
  const ops::BlockIndex dense = ops::build_block_index(p, 4, s.data(), dense_rule);
  const std::vector<float> out = ops::reference_block_attention(p, in, dense, 0, 512);
  // Plain causal attention, written independently, for a few rows.
  for (int64_t i : {0L, 1L, 127L, 128L, 300L, 511L}) {
    for (int h : {0, 3}) {
      const int g = h / 2;
      std::vector<double> w(size_t(i + 1));
      double m = -INFINITY, z = 0;
      for (int64_t t = 0; t <= i; ++t) {
        double dot = 0;
        for (int e = 0; e < 128; ++e) dot += double(in.q[(i * 4 + h) * 128 + e]) * in.k[(t * 2 + g) * 128 + e];
        w[t] = dot / std::sqrt(128.0);
        m = std::max(m, w[t]);
      }
      for (double& x : w) z += (x = std::exp(x - m));
      for (int e : {0, 77, 127}) {
        double o = 0;
        for (int64_t t = 0; t <= i; ++t) o += w[t] * in.v[(t * 2 + g) * 128 + e];
        CHECK(out[(i * 4 + h) * 128 + e] == Approx(o / z).margin(1e-5));
      }
    }
  }
  // Keeping only the diagonal changes the rows of the later blocks.
  BlockSelectRule diag_rule;
  diag_rule.alpha = 1.0f;
  diag_rule.sink_blocks = 0;
  diag_rule.min_blocks = 0;
  diag_rule.local_blocks = 1;
  std::vector<double> flat(s.size());  // scores 0, 1, 2, 0, ...: alpha 1 keeps a few
  for (size_t j = 0; j < flat.size(); ++j) flat[j] = double(j % 3);
  const ops::BlockIndex sparse = ops::build_block_index(p, 4, flat.data(), diag_rule);
  REQUIRE(sparse.kept() < dense.kept());
  const std::vector<float> out2 = ops::reference_block_attention(p, in, sparse, 0, 512);
  double diff = 0;
  for (size_t j = 0; j < out.size(); ++j) diff = std::max(diff, double(std::fabs(out[j] - out2[j])));
  CHECK(diff > 1e-2);
}
