// The ceilings a bench run takes its floors from: the card's published values, or a
// bench/ceilings.py file's, with whatever it lacks from the card's.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "support.h"
#include "tools/bench_common.h"

using namespace winnow::tools;

TEST_CASE("bench ceilings: the card's published values, a file's over them", "[tool]") {
  const Ceilings h100 = published_ceilings("NVIDIA H100 80GB HBM3");
  CHECK(h100.copy_tbps == Approx(3.022));
  CHECK(h100.fp8_tflops == Approx(1434));
  CHECK(ceilings_text(h100) == "published (H100)");
  const Ceilings h200 = published_ceilings("NVIDIA H200");
  CHECK(h200.copy_tbps == Approx(4.249));
  CHECK(h200.fp8_tflops == Approx(1352));
  CHECK(ceilings_text(h200) == "published (H200)");
  CHECK(published_ceilings("NVIDIA B200").copy_tbps == Approx(4.249));  // another card: the H200's
  CHECK(read_ceilings("", "NVIDIA H100 80GB HBM3").copy_tbps == Approx(3.022));

  winnow::test::TempDir dir;
  const std::string partial = (dir.path / "partial.json").string();
  std::ofstream(partial) << R"({"copy_tbps": 2.5})";
  const Ceilings mixed = read_ceilings(partial, "NVIDIA H100 80GB HBM3");
  CHECK(mixed.copy_tbps == Approx(2.5));
  CHECK(mixed.bf16_tflops == Approx(790));  // the H100's, not the H200's
  CHECK(ceilings_text(mixed) == "mixed (H100)");
  const std::string full = (dir.path / "full.json").string();
  std::ofstream(full) << R"({"copy_tbps": 2.5, "bf16_tflops": 700, "fp8_tflops": 1300})";
  CHECK(ceilings_text(read_ceilings(full, "NVIDIA H200")) == "measured");
}
