// The retrieval mode (ops/common/knn_retrieval.h) on the GPU: fused == materialize + exact select
// bit for bit (the materialize variant of the same kernel), and the CPU double reference
// on the first and last rows. Fresh random inputs on every run (the seed is printed).
#include <algorithm>
#include <cstring>

#include "support.h"
#include "topk_check.h"
#include "knn/knn_workspace.cuh"

using namespace winnow;
using winnow::test::GpuFixture;
using test::run_and_check;
using test::single_head;

namespace {

// Builds the op and requires that it took the retrieval mode.
void require_retrieval(const ops::TopkProblem& p) {
  auto op = GpuFixture::get().build(p);
  REQUIRE(op->retrieval_mode());
  UNSCOPED_INFO(op->launch_info());
}

ir::Expr score_named(const std::string& name) {
  if (name == "l2") return ir::l2();
  if (name == "cosine") return ir::cosine();
  return ir::ip();
}

}  // namespace

TEST_CASE("knn retrieval: ip, l2, cosine at batch 1, 16, 64, 256, unaligned N", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  const std::string score = GENERATE("ip", "l2", "cosine");
  // Every batch and every k for each score, paired rather than crossed: the first visit
  // spent 3-18 s per section (36 of them ran past the suite's time).
  const auto [rows, k] = GENERATE(table<int, int>({{1, 1}, {16, 128}, {64, 1024}, {256, 128},
                                                   {64, 1}}));
  const ops::DType t = rows == 16 ? ops::DType::BF16 : ops::DType::F16;
  INFO(score << " rows " << rows << " k " << k);
  auto p = single_head(score_named(score), 768, k, t);
  require_retrieval(p);
  const int64_t keys = test::sized(60013, 9001);  // > capacity: sample, filter, select
  run_and_check(p, rows, keys, {}, {0, rows - 1}, false);
}

TEST_CASE("knn retrieval: k = 8192 sorted and k = 2048 by index, absolute, d = 128 and 1024",
          "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  const int dim = GENERATE(128, 1024);
  // The select's sort by score and by index of more than 1024 entries.
  const auto [k, sorted] = GENERATE(table<int, bool>({{8192, true}, {2048, false}}));
  INFO("k " << k << " sorted " << sorted);
  auto p = single_head(ir::ip(), dim, k, ops::DType::BF16);
  p.sorted = sorted;
  p.absolute_indices = true;
  require_retrieval(p);
  run_and_check(p, 40, test::sized(100003, 40000), {}, {0, 39}, false);
}

TEST_CASE("knn retrieval: k = N, k > N, N below a tile, N = capacity + 1", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  auto p = single_head(ir::l2(), 64, 1000, ops::DType::F16);
  require_retrieval(p);
  const int64_t keys = GENERATE(1, 100, 1000, 4097);
  INFO("keys " << keys);
  run_and_check(p, 9, keys, {}, {}, false);
}

TEST_CASE("knn retrieval: heavy ties and all-equal scores take counted fallback rounds, exact",
          "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  const int levels = GENERATE(1, 4);  // 1: every score 0 (ties broken by index alone)
  const int k = GENERATE(1, 1024, 4096);
  auto p = single_head(ir::ip(), 128, k, ops::DType::F16);
  // k = 4096: the fallback rounds with a list of 16384 entries, by index and by score.
  p.sorted = levels == 4;
  require_retrieval(p);
  ops::DataOptions opt;
  opt.levels = levels;
  const int64_t keys = test::sized(30011, 9001);
  const ops::RunResult r = run_and_check(p, 64, keys, opt, {0, 63}, true);
  UNSCOPED_INFO("fallback rows " << r.fallback_rows);
  // Every score equal: the sample's threshold admits every key, so every row overflows
  // its list (knn_capacity(k) entries) and needs the fallback (k = 1 included), wherever
  // the keys outnumber the list (not at k = 4096 under WINNOW_TEST_SMALL's 9001 keys).
  if (levels == 1 && winnow::knn_capacity(k) < keys) CHECK(r.fallback_rows == 64);
}

TEST_CASE("knn retrieval: a tuned point's capacity, sample and CTAs per SM, exact", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  // The knobs of ops/topk/topk_space.h's retrieval space: twice the list, larger samples, two
  // stream CTAs per SM (d = 128: they fit), on scores of few levels (heavy ties: the lists
  // overflow and take the fallback rounds). Below-default capacities and samples are
  // raised to the defaults (capacity 1024 reads as 4096).
  struct Knobs {
    int capacity, sample, ctas;
  };
  const Knobs kn = GENERATE(Knobs{8192, -1, 0}, Knobs{0, 16384, 0}, Knobs{0, kKnnMaxSampleCap, 2},
                            Knobs{1024, 512, 2});
  INFO("capacity " << kn.capacity << " sample " << kn.sample << " ctas " << kn.ctas);
  auto p = single_head(ir::ip(), 128, 300, ops::DType::BF16);
  p.candidate_capacity = kn.capacity;
  p.sample_size = kn.sample;
  p.max_ctas_per_sm = kn.ctas;
  p.sorted = true;
  require_retrieval(p);
  ops::DataOptions opt;
  opt.levels = 64;
  run_and_check(p, 70, test::sized(200003, 50000), opt, {0, 69}, true);
}

TEST_CASE("knn retrieval: the radix fallback answers an adversarial corpus exactly", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  // Every query q = (1, 1/2048, 0, ...); key j scores floor(j / 2048) + (j % 2048) / 2048
  // (distinct, rising with j), except the keys of the sample's tiles, which score 1000 and
  // up: the sample's threshold keeps fewer than k, the round after it takes every key, and
  // the first survivors to arrive (the lowest j) are the worst. The rounds from the stored
  // entries do not converge on it (tests/test_knn_radix.cpp models the same); the radix
  // rounds answer every row exactly.
  const int k = GENERATE(1024, 4096);
  INFO("k " << k);
  auto p = single_head(ir::ip(), 128, k, ops::DType::F16);
  require_retrieval(p);
  const int64_t keys = test::sized(1 << 20, 1 << 18);
  const KnnSample sample = knn_sample(keys, k, knn_capacity(k), kKnnMaxSampleCap);
  REQUIRE(sample.tiles > 0);
  const ops::RunResult r = run_and_check(p, 64, keys, {}, {0, 63}, true, [&](ops::ProblemData& d) {
    std::vector<float> q(d.q.values.size(), 0.0f), kv(d.k.values.size(), 0.0f);
    for (int64_t i = 0; i < d.rows; ++i) {
      q[size_t(i * 128)] = 1.0f;
      q[size_t(i * 128 + 1)] = 1.0f / 2048.0f;
    }
    for (int64_t j = 0; j < d.num_keys; ++j) {
      const int64_t tile = j / kKnnKeyTile;
      const bool sampled = tile % sample.stride == 0 && tile / sample.stride < sample.tiles;
      kv[size_t(j * 128)] = sampled ? 1000.0f : float(j / 2048);
      kv[size_t(j * 128 + 1)] = float(j % 2048);
    }
    d.q = ops::make_tensor(d.q.dtype, q);
    d.k = ops::make_tensor(d.k.dtype, kv);
  });
  UNSCOPED_INFO("fallback rows " << r.fallback_rows);
  CHECK(r.fallback_rows == 64);  // every row took the fallback, as built
}

TEST_CASE("knn retrieval: NaN and inf scores rank as torch.topk ranks them", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  auto p = single_head(ir::ip(), 256, GENERATE(1, 300), ops::DType::F16);
  p.sorted = true;
  require_retrieval(p);
  ops::DataOptions opt;
  opt.nan_fraction = 0.01;
  opt.inf_fraction = 0.01;
  run_and_check(p, 24, test::sized(20000, 9000), opt, {}, false);
}

TEST_CASE("knn: l2 with distance output reports ||q - k||^2 on both paths, padding +inf",
          "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const std::string retrieval = GENERATE("1", "0");  // the retrieval mode, the topk kernel
  test::ScopedEnv env("WINNOW_KNN_RETRIEVAL", retrieval.c_str());
  auto p = single_head(ir::l2(), 256, GENERATE(1, 700), ops::DType::F16);
  p.sorted = GENERATE(false, true);
  p.negate_scores = true;
  INFO("retrieval " << retrieval << " k " << p.k << " sorted " << p.sorted);
  REQUIRE(GpuFixture::get().build(p)->retrieval_mode() == (retrieval == "1"));
  // 500 keys < k = 700: padding; the rest exercise the sample, filter and select.
  const int64_t keys = GENERATE(500, 30011);
  const ops::RunResult r = run_and_check(p, 16, keys, {}, {0, 15}, false);
  // A distance is never negative beyond rounding (||q||^2 + ||k||^2 - 2 q.k in fp32).
  for (float s : r.scores)
    if (s == s && s != INFINITY) CHECK(s > -1e-2f * 256);
}

TEST_CASE("knn: l2 and cosine read the key_norms input on both paths, exact", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const std::string retrieval = GENERATE("1", "0");  // the retrieval mode, the topk kernel
  test::ScopedEnv env("WINNOW_KNN_RETRIEVAL", retrieval.c_str());
  const std::string score = GENERATE("l2", "cosine");
  const int levels = GENERATE(0, 4);  // 4: integer keys and norms, heavy ties
  auto p = single_head(score_named(score), 256, GENERATE(1, 700), ops::DType::F16);
  p.sorted = levels == 4;
  p.negate_scores = score == "l2" && levels == 0;  // the distance, of the given norms
  INFO("retrieval " << retrieval << " " << score << " levels " << levels << " k " << p.k);
  REQUIRE(GpuFixture::get().build(p)->retrieval_mode() == (retrieval == "1"));
  ops::DataOptions opt;
  opt.levels = levels;
  // Norms 0.5-2x each key's own: a kernel that summed the squares would miss the reference.
  opt.key_norms = true;
  opt.nan_fraction = levels == 0 ? 0.002 : 0.0;
  opt.inf_fraction = levels == 0 ? 0.002 : 0.0;
  run_and_check(p, 16, test::sized(30011, 9001), opt, {0, 15}, levels > 0 && score == "l2");
}

TEST_CASE("knn: WINNOW_KNN_RETRIEVAL=0 keeps the topk kernel, still exact", "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  test::ScopedEnv off("WINNOW_KNN_RETRIEVAL", "0");
  auto p = single_head(ir::ip(), 768, 128, ops::DType::F16);
  REQUIRE_FALSE(GpuFixture::get().build(p)->retrieval_mode());
  run_and_check(p, 16, 20011, {}, {0, 15}, false);
}

TEST_CASE("knn retrieval: a sample threshold too low overflows the lists and the fallback is exact",
          "[gpu][knn]") {
  WINNOW_REQUIRE_GPU();
  test::ScopedEnv on("WINNOW_KNN_RETRIEVAL", "1");
  INFO("seed " << test::test_seed());
  // ip with q = e0, so a key's score is its first element. The sampled tiles hold -1 (the
  // sample's threshold is then -1), `over` keys of the first three waves of tiles (one
  // CTA per SM, each taking one tile at a time) random values in (0, 1), the rest -2: the
  // sampled keys alone pass, more than the capacity, so every row takes the fallback.
  const int k = 128, dim = 128;
  const int64_t keys = test::sized(int64_t(1) << 19, int64_t(1) << 18);
  auto p = single_head(ir::ip(), dim, k, ops::DType::F16);
  p.sorted = true;
  require_retrieval(p);
  const int cap = knn_capacity(k);
  const KnnSample s = knn_sample(keys, k, cap, kKnnMaxSampleCap);
  REQUIRE(s.tiles > 0);
  const int over = 256;
  REQUIRE(s.valid + over > cap);  // the case overflows
  REQUIRE(s.stride > 8);          // at most a few sampled tiles per wave
  const int64_t wave = GpuFixture::get().ctx->info().sm_count;  // tiles in flight at once
  std::mt19937_64 rng(test::test_seed());
  auto set = [](ops::HostTensor& t, int64_t i, float v) {
    const uint16_t h = ops::encode_f16(v);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    t.values[size_t(i)] = v;
  };
  const ops::RunResult r = run_and_check(p, 4, keys, {}, {}, true, [&](ops::ProblemData& d) {
    for (int64_t i = 0; i < int64_t(d.q.count()); ++i) set(d.q, i, i % dim == 0 ? 1.0f : 0.0f);
    std::vector<int64_t> others;  // not sampled, in the first three waves
    for (int64_t key = 0; key < keys; ++key) {
      const int64_t tile = key / kKnnKeyTile;
      const bool sampled = tile % s.stride == 0 && tile / s.stride < s.tiles;
      for (int e = 0; e < dim; ++e) set(d.k, key * dim + e, e > 0 ? 0.0f : sampled ? -1.0f : -2.0f);
      if (!sampled && tile < 3 * wave) others.push_back(key);
    }
    std::shuffle(others.begin(), others.end(), rng);
    for (int i = 0; i < over; ++i) set(d.k, others[size_t(i)] * dim, float(1 + rng() % 1023) / 1024.0f);
  });
  CHECK(r.fallback_rows == 4);
}
