// The block kernels' shared-memory layouts keep every region at its access's alignment for
// any block count: the reductions' words 16-byte aligned, the mbarriers 8, the swizzled
// wgmma tiles 1024. Found on the H200 (2026-12-02): with 130 blocks the mma.sync score
// pass put its reduction scratch 2 bytes off a word ("misaligned address",
// bench/results/2026-12-02-memcheck-block-misaligned-2cae93b.txt).
#include <catch2/catch.hpp>

#include "block/block_params.cuh"

using winnow::BlockScoreSmem;
using winnow::WgmmaScoreSmem;

TEST_CASE("block-select's shared-memory regions are aligned for every block count", "[block]") {
  int bad = 0;
  for (const int dim : {64, 128}) {
    for (const int tile : {64, 128}) {
      for (int blocks = 1; blocks <= 2100; ++blocks) {
        const BlockScoreSmem m{dim, tile, blocks, 8};
        bad += m.scores_off() % 16 != 0 || m.partial_off() % 4 != 0 || m.reduce_off() % 16 != 0;
        const WgmmaScoreSmem w{dim, tile, blocks};
        bad += w.stage_off(0) % 1024 != 0 || w.stage_off(1) % 1024 != 0 ||
               w.stats_off() % 16 != 0 || w.reduce_off() % 16 != 0 || w.counters_off() % 4 != 0 ||
               w.barriers_off() % 8 != 0;
        if (bad) {
          INFO("dim " << dim << " tile " << tile << " blocks " << blocks);
          REQUIRE(bad == 0);
        }
      }
    }
  }
  CHECK(bad == 0);
}
