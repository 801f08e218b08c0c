// The topk workspace layout (templates/topk/topk_workspace.cuh), which the host sizes and the
// kernel addresses with the same arithmetic: regions in order and disjoint, every row's
// buffers and every part's selection inside its region.
#include <catch2/catch.hpp>

#include <random>

#include "support.h"
#include "topk/topk_workspace.cuh"

using winnow::TopkWorkspace;

TEST_CASE("topk workspace: regions in order, disjoint, and each slot inside its region",
          "[ref]") {
  std::mt19937_64 rng(winnow::test::test_seed());
  CHECK(winnow::next_pow2(0) == 1);
  CHECK(winnow::next_pow2(1) == 1);
  CHECK(winnow::next_pow2(2048) == 2048);
  CHECK(winnow::next_pow2(2049) == 4096);
  for (int trial = 0; trial < 200; ++trial) {
    const int rows = 1 + int(rng() % 16), k = 1 + int(rng() % 8192);
    const int capacity = k + int(rng() % 65536);
    const long long ctas = 1 + (long long)(rng() % 600);
    const TopkWorkspace w{rows, capacity, winnow::next_pow2(k)};
    INFO("rows " << rows << " k " << k << " capacity " << capacity << " ctas " << ctas);
    REQUIRE(w.k_pow2 >= k);
    REQUIRE(w.k_pow2 < 2 * k + 1);
    CHECK(w.buffers_offset() == TopkWorkspace::counters_bytes());
    CHECK(w.partials_offset(ctas) == w.buffers_offset() + ctas * w.cta_words() * 8);
    CHECK(w.block_done_offset(ctas) > w.partials_offset(ctas));
    CHECK(w.bytes(ctas) == w.counters_bytes() + ctas * w.bytes_per_cta());
    // A row's candidates and selection list lie inside its CTA's words, one after another.
    const int r = int(rng() % rows);
    CHECK(w.candidates(r) + capacity == w.selection(r));
    CHECK(w.selection(r) + w.k_pow2 <= w.cta_words());
    if (r + 1 < rows) CHECK(w.selection(r) + w.k_pow2 == w.candidates(r + 1));
    // Parts: blocks x splits <= ctas (execute's rule); every part's list inside the partials.
    const int splits = 1 + int(rng() % ctas);
    const long long blocks = ctas / splits;
    const long long block = rng() % blocks;
    const int split = int(rng() % splits);
    const long long at = w.partial(block, splits, split, r);
    CHECK(at >= 0);
    CHECK(w.partials_offset(ctas) + (at + w.k_pow2) * 8 <= w.block_done_offset(ctas));
    // The lists follow each other: rows of a part, parts of a block, blocks.
    const long long next = r + 1 < rows       ? w.partial(block, splits, split, r + 1)
                           : split + 1 < splits ? w.partial(block, splits, split + 1, 0)
                                                : w.partial(block + 1, splits, 0, 0);
    CHECK(at + w.k_pow2 == next);
  }
}
