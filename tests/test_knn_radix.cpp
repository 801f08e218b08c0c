// The retrieval mode's exact fallback as a host model (the same knn_digit and knn_refine
// the kernels call, templates/knn/knn_workspace.cuh; the stream's list as first-come slots and
// its count, the select's choices of knn_select.cuh): with the radix rounds (every
// top-k plan) every row is answered within kKnnRadixRounds fallback rounds and
// equals the exact top-k, whatever the order of the keys and their ties; without them the
// rounds from the stored entries leave a row unanswered when the first threshold is far
// too low and the corpus arrives in ascending order (the hole bench/NOTES.md, session 23,
// describes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support.h"
#include "knn/knn_workspace.cuh"
#include "select/rank_order.cuh"

using namespace winnow;

namespace {

struct Outcome {
  bool answered = false;
  int rounds = 0;               // fallback rounds taken
  std::vector<u64> answer;      // the need best RankKeys, best first
};

// One row through the rounds. rks: the corpus's RankKeys in arrival order. first: the first
// threshold (the sample's). The list keeps the first `cap` survivors of a round.
Outcome run_rounds(const std::vector<u64>& rks, int k, int cap, u64 first, bool radix) {
  const u32 need = u32(std::min<size_t>(size_t(k), rks.size()));
  const int rounds = radix ? kKnnRadixRounds : 3;
  u64 thr = first;
  u32 fixed = 0;
  std::vector<u32> hist(kKnnDigits);
  Outcome out;
  for (int round = 0; round <= rounds; ++round) {
    std::vector<u64> list;
    u32 count = 0;
    std::fill(hist.begin(), hist.end(), 0u);
    for (u64 rk : rks) {
      if (rk < thr) continue;
      if (radix && round > 0) {
        const int d = knn_digit(rk, thr, fixed);
        if (d >= 0) ++hist[size_t(d)];
      }
      if (count++ < u32(cap)) list.push_back(rk);
    }
    if (count <= u32(cap) && count >= need) {
      std::sort(list.begin(), list.end(), std::greater<u64>());
      list.resize(need);
      out.answered = true;
      out.rounds = round;
      out.answer = list;
      return out;
    }
    if (radix && round > 0) {
      const KnnRefined next = knn_refine(hist.data(), count, need, thr, fixed);
      REQUIRE(next.survivors >= need);
      REQUIRE(next.fixed > fixed);
      thr = next.threshold;
      fixed = next.fixed;
    } else if (count > u32(cap)) {
      std::vector<u64> stored = list;
      std::sort(stored.begin(), stored.end(), std::greater<u64>());
      thr = std::max(thr, stored[size_t(k) - 1]);  // the k-th best of the stored entries
      fixed = 0;
    } else {
      thr = 0;  // too few: every key
      fixed = 0;
    }
  }
  out.rounds = rounds;
  return out;
}

std::vector<u64> exact_best(std::vector<u64> rks, int k) {
  std::sort(rks.begin(), rks.end(), std::greater<u64>());
  rks.resize(std::min<size_t>(size_t(k), rks.size()));
  return rks;
}

// Keys 0..n-1 with scores from `score`, arriving in index order.
template <class F>
std::vector<u64> corpus(int n, F score) {
  std::vector<u64> rks(size_t(n), 0);
  for (int i = 0; i < n; ++i) rks[size_t(i)] = rank_key(order_key(score(i)), i);
  return rks;
}

}  // namespace

TEST_CASE("knn radix fallback: every row answered within its rounds, exact", "[knn]") {
  INFO("seed " << test::test_seed());
  std::mt19937_64 rng(test::test_seed());
  const int n = 1 << 20;
  struct Case {
    const char* name;
    int levels;       // 0: random scores
    bool ascending;   // scores grow with the index (the first arrivals are the worst)
  };
  const Case c = GENERATE(Case{"4 levels, ascending", 4, true}, Case{"every score equal", 1, false},
                          Case{"random, ascending", 0, true}, Case{"random", 0, false},
                          Case{"3 levels with NaN and inf", 3, false});
  const int k = GENERATE(1, 1024, 4096);
  INFO(c.name << ", k " << k);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> scores(static_cast<size_t>(n));
  for (float& s : scores) s = c.levels > 0 ? float(int(std::floor((u(rng) + 1.0f) * 0.5f * c.levels))) : u(rng);
  if (c.ascending) std::sort(scores.begin(), scores.end());
  if (std::string(c.name).find("NaN") != std::string::npos) {
    for (int i = 0; i < n; i += 997) scores[size_t(i)] = std::nanf("");
    for (int i = 5; i < n; i += 1999) scores[size_t(i)] = INFINITY;
  }
  const auto rks = corpus(n, [&](int i) { return scores[size_t(i)]; });
  const int cap = knn_capacity(k);
  // The first threshold far too low (every key survives), as a misleading sample gives.
  const Outcome o = run_rounds(rks, k, cap, 0, true);
  INFO("rounds " << o.rounds);
  REQUIRE(o.answered);
  CHECK(o.rounds <= kKnnRadixRounds);
  CHECK(o.answer == exact_best(rks, k));
}

TEST_CASE("knn radix fallback: knn_digit and knn_refine at the edges", "[knn]") {
  // No bit fixed: the top 11 bits; 64 fixed: nothing left (the group is one key).
  CHECK(knn_digit(0xFFE0000000000000ull, 0, 0) == 2047);
  CHECK(knn_digit(0x0020000000000000ull, 0, 0) == 1);
  CHECK(knn_digit(0x0010000000000000ull, 0, 0) == 0);
  CHECK(knn_digit(5, 5, 64) == -1);
  // Outside the fixed prefix: above the group (-1).
  CHECK(knn_digit(0xFFE0000000000000ull, 0x0010000000000000ull, 11) == -1);
  // The last 9 bits (64 = 5 x 11 + 9).
  CHECK(knn_digit(0x1FFull, 0, 55) == 511);
  // A histogram with 3 keys above the group, need 5: the 4th and 5th best lie in bin 7
  // (bins 9: 1 key), so the threshold fixes digit 7 and keeps 3 + 1 + 2 survivors.
  std::vector<u32> h(kKnnDigits, 0u);
  h[9] = 1;
  h[7] = 2;
  h[2] = 10;
  const KnnRefined r = knn_refine(h.data(), 3 + 13, 5, 0, 0);
  CHECK(r.fixed == 11);
  CHECK(r.threshold == (7ull << 53));
  CHECK(r.survivors == 6);
  // A threshold above the digit's low edge is kept.
  const KnnRefined r2 = knn_refine(h.data(), 16, 5, (7ull << 53) + 3, 0);
  CHECK(r2.threshold == (7ull << 53) + 3);
}

TEST_CASE("knn fallback without the radix rounds: ascending ties leave a row unanswered", "[knn]") {
  // What the rounds from the stored entries (removed, docs/decisions/0045) did on the
  // first case above: the stored entries are the first (worst) survivors, so three rounds do not converge.
  const int n = 1 << 20, k = 1024;
  const auto rks = corpus(n, [&](int i) { return float(i / (n / 4)); });
  const Outcome o = run_rounds(rks, k, knn_capacity(k), 0, false);
  CHECK_FALSE(o.answered);
  const Outcome fixed = run_rounds(rks, k, knn_capacity(k), 0, true);
  CHECK(fixed.answered);
  CHECK(fixed.answer == exact_best(rks, k));
}

TEST_CASE("knn radix fallback: the GPU case's corpus, from the sample's threshold", "[knn]") {
  // The corpus of "knn retrieval: the radix fallback answers an adversarial corpus exactly"
  // (tests/test_knn_gpu.cpp): distinct scores rising with the index, the sample's tiles at
  // 1000 and up; the first threshold as knn_threshold computes it (the rank-th best of the
  // sample's scores, every index admitted).
  const int n = 1 << 20;
  for (int k : {1024, 4096}) {
    INFO("k " << k);
    const int cap = knn_capacity(k);
    const KnnSample sample = knn_sample(n, k, cap, kKnnMaxSampleCap);
    REQUIRE(sample.tiles > 0);
    const auto score = [&](int j) {
      const int tile = j / kKnnKeyTile;
      const bool sampled = tile % sample.stride == 0 && tile / sample.stride < sample.tiles;
      return (sampled ? 1000.0f : float(j / 2048)) + float(j % 2048) / 2048.0f;
    };
    const auto rks = corpus(n, score);
    std::vector<u32> sampled;
    for (int t = 0; t < sample.tiles; ++t)
      for (int i = 0; i < kKnnKeyTile; ++i) sampled.push_back(order_key(score(t * sample.stride * kKnnKeyTile + i)));
    std::sort(sampled.begin(), sampled.end(), std::greater<u32>());
    const u64 first = u64(sampled[size_t(sample.rank) - 1]) << 32;
    CHECK_FALSE(run_rounds(rks, k, cap, first, false).answered);
    const Outcome o = run_rounds(rks, k, cap, first, true);
    REQUIRE(o.answered);
    CHECK(o.answer == exact_best(rks, k));
  }
}
