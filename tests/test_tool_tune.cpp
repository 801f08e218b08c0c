// `winnow tune` as a user runs it: without a GPU tuning says it needs one (and fails),
// while --show and --clear work on the database in the cache folder.
#include <catch2/catch.hpp>

#include "runtime/cuda_driver.h"
#include "runtime/tuning_db.h"
#include "support.h"
#include "tool_run.h"

using Catch::Matchers::Contains;
using winnow::test::run_tool;

TEST_CASE("winnow tune: --show and --clear work, tuning needs a GPU", "[tool][tune]") {
  winnow::test::TempDir dir;
  // A record, as a tuning run would leave it.
  winnow::rt::TuningKey key;
  key.op = "topk";
  key.shape = "h64.d128.r8192.n65536";
  key.k_bucket = 2048;
  winnow::rt::TunedRecord rec;
  rec.params = "rows_per_cta=2 key_tile=64 bins=2048 sample_size=-1 candidate_capacity=0 "
               "key_splits=0 max_ctas_per_sm=0";
  rec.time_us = 80;
  rec.heuristic_us = 100;
  REQUIRE(winnow::rt::TuningDb(dir.path).store(key, rec));

  winnow::test::ScopedEnv cache_dir{"WINNOW_CACHE_DIR", dir.path.string()};
  auto r = run_tool("tune --show");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("1 tuned plan in"));
  CHECK_THAT(r.output, Contains("key_tile=64"));
  CHECK_THAT(r.output, Contains("1.25x"));
  r = run_tool("tune --show --op block-select");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("0 tuned plans"));

  if (!winnow::rt::gpu_available()) {
    r = run_tool("tune dsa-prefill --T 64K");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("tuning times candidate plans on a GPU, and there is none"));
    CHECK_THAT(r.output, Contains("--show` and `--clear` work without one"));
  }
  r = run_tool("tune --clear");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("removed 1 tuned plan from"));
  CHECK(winnow::rt::TuningDb(dir.path).list().empty());

  r = run_tool("tune");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("give a workload to tune, or --show, or --clear"));
  r = run_tool("tune no-such-workload");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("unknown workload 'no-such-workload'"));
  r = run_tool("tune --clear --op topk");
  CHECK(r.exit_code == 2);
  r = run_tool("tune --help");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("winnow tune --show"));
}

TEST_CASE("winnow tune block-select: its options are checked and tuning needs a GPU", "[tool][tune]") {
  auto r = run_tool("tune --help");
  CHECK_THAT(r.output, Contains("block-select (its whole call"));
  r = run_tool("tune block-select --k 2048");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("block-select takes --T (its length), not --k"));
  r = run_tool("tune block-select dsa-prefill");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("one workload at a time"));
  if (!winnow::rt::gpu_available()) {
    r = run_tool("tune block-select --T 128K");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("tuning times candidate plans on a GPU, and there is none"));
  }
}
