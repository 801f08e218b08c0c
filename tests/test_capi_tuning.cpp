// Tuning policies through the C API (winnowPlanBuildEx, winnowPlanGetTuning): HEURISTIC is
// today's plan; TUNED_IF_PRESENT takes a record planted in the database; TUNE_ON_MISS with
// no GPU says so; bad options get a status and a message.
#include <catch2/catch.hpp>

#include <memory>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "ops/common/names.h"
#include "ops/topk/topk_tuning.h"
#include "tests/cache_support.h"
#include "tests/capi_support.h"

using namespace winnow;

namespace {

// A context whose kernel cache (and so tuning database) lives in a fresh folder.
struct TuningContext {
  test::TempDir dir;
  test::ScopedEnv cache_dir{"WINNOW_CACHE_DIR", dir.path.string()};
  test::ScopedEnv disk_on{"WINNOW_DISABLE_DISK_CACHE", nullptr};
  winnowContext_t h = nullptr;
  TuningContext() {
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowCreate(&h, 0) == WINNOW_STATUS_SUCCESS);
  }
  ~TuningContext() { winnowDestroy(h); }
};

struct PlanHandle {
  winnowPlan_t h = nullptr;
  PlanHandle(winnowContext_t ctx, const winnowProblemDesc_t& d) {
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowPlanCreate(ctx, &d, &h) == WINNOW_STATUS_SUCCESS);
  }
  ~PlanHandle() { winnowPlanDestroy(h); }
  std::string source() const {
    const char* s = nullptr;
    REQUIRE(winnowPlanGetSource(h, &s) == WINNOW_STATUS_SUCCESS);
    return s;
  }
  winnowPlanTuning_t tuning() const {
    winnowPlanTuning_t t{};
    t.struct_size = sizeof(t);
    t.version = WINNOW_PLAN_TUNING_VERSION;
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowPlanGetTuning(h, &t) == WINNOW_STATUS_SUCCESS);
    return t;
  }
};

winnowProblemDesc_t dsa_desc() {  // relu_mh, 64 heads, d 128, fp8 with key scales, k 2048
  winnowProblemDesc_t d;
  winnowProblemDescInit(&d);
  d.arch = "sm_90a";
  return d;
}

// The op-level problem the C API makes of dsa_desc(), for planting a record under its key.
ops::TopkProblem dsa_problem() {
  ops::TopkProblem p;
  p.score = ops::find_builtin_score(WINNOW_SCORE_RELU_MH)->program(true);
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

winnowBuildOptions_t options(winnowTuningPolicy_t policy, int64_t rows, int64_t keys) {
  winnowBuildOptions_t o;
  winnowBuildOptionsInit(&o);
  o.tuning_policy = policy;
  o.rows = rows;
  o.num_keys = keys;
  return o;
}

// The database key of dsa_problem at a shape, as winnowPlanBuildEx computes it on this
// machine (with its device, where there is one).
rt::TuningKey planted_key(const ops::TopkShape& shape) {
  std::unique_ptr<rt::Context> device;
  if (rt::gpu_available()) device = std::make_unique<rt::Context>(0);
  return ops::topk_tuning_key(dsa_problem(), device.get(), *backend::make_nvrtc_backend(), shape);
}

}  // namespace

TEST_CASE("build options: defaults and checks", "[capi][tune]") {
  winnowBuildOptions_t o;
  winnowBuildOptionsInit(&o);
  CHECK(o.struct_size == sizeof(o));
  CHECK(o.version == WINNOW_BUILD_OPTIONS_VERSION);
  CHECK(o.tuning_policy == WINNOW_TUNING_TUNED_IF_PRESENT);
  CHECK(o.rows == 0);
  CHECK(o.num_keys == 0);
  CHECK(o.tune_budget_s == 60);

  test::Context ctx;
  PlanHandle plan(ctx.h, dsa_desc());
  winnowPlanTuning_t t{sizeof(winnowPlanTuning_t), WINNOW_PLAN_TUNING_VERSION,
                       WINNOW_TUNING_HEURISTIC, 0};
  REQUIRE_STATUS(winnowPlanGetTuning(plan.h, &t), WINNOW_STATUS_NOT_BUILT, "not built");
  REQUIRE_STATUS(winnowPlanGetTuning(plan.h, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "tuning is null");
  t.version = 9;
  REQUIRE_STATUS(winnowPlanGetTuning(plan.h, &t), WINNOW_STATUS_INVALID_ARGUMENT,
                 "tuning->version = 9");
  REQUIRE_STATUS(winnowPlanBuildEx(nullptr, &o), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  o.version = 7;
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->version = 7");
  o = options(static_cast<winnowTuningPolicy_t>(5), 0, 0);
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT,
                 "tuning_policy = 5");
  o = options(WINNOW_TUNING_TUNED_IF_PRESENT, 64, 0);
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT,
                 "must both be positive");
  o = options(WINNOW_TUNING_TUNED_IF_PRESENT, -1, -1);
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT, "rows = -1");
  o = options(WINNOW_TUNING_TUNE_ON_MISS, 0, 0);
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT,
                 "set options->rows and options->num_keys");
  o = options(WINNOW_TUNING_TUNE_ON_MISS, 64, 65536);
  o.tune_budget_s = 0;
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_INVALID_ARGUMENT,
                 "tune_budget_s = 0");
}

TEST_CASE("policies: HEURISTIC is today's plan, TUNED_IF_PRESENT takes the database's",
          "[capi][tune]") {
  TuningContext ctx;
  const ops::TopkShape shape{4096, 65536};
  // A planted record: key tile 64 instead of the heuristic's 128 (wgmma).
  const ops::TopkPoint point{2, 64, 2048, -1, 0, 0, 0};
  {
    rt::TuningDb db(ctx.dir.path);
    rt::TunedRecord r;
    r.params = point.text();
    r.time_us = 123.5;
    r.heuristic_us = 150;
    REQUIRE(db.store(planted_key(shape), r));
  }
  PlanHandle heuristic(ctx.h, dsa_desc());
  const std::string heuristic_source = heuristic.source();
  REQUIRE_THAT(heuristic_source, Catch::Contains("kKeyTile = 128"));

  SECTION("HEURISTIC ignores the record") {
    const winnowBuildOptions_t o = options(WINNOW_TUNING_HEURISTIC, shape.rows, shape.num_keys);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowPlanBuildEx(heuristic.h, &o) == WINNOW_STATUS_SUCCESS);
    CHECK(heuristic.source() == heuristic_source);
    CHECK(heuristic.tuning().produced_by == WINNOW_TUNING_HEURISTIC);
    CHECK(heuristic.tuning().expected_us == -1);
  }
  SECTION("TUNED_IF_PRESENT without a shape, or in another bucket, is the heuristic plan") {
    PlanHandle plan(ctx.h, dsa_desc());
    REQUIRE(winnowPlanBuild(plan.h) == WINNOW_STATUS_SUCCESS);
    CHECK(plan.source() == heuristic_source);
    CHECK(plan.tuning().produced_by == WINNOW_TUNING_HEURISTIC);
    const winnowBuildOptions_t o = options(WINNOW_TUNING_TUNED_IF_PRESENT, 2 * shape.rows,
                                           shape.num_keys);
    REQUIRE(winnowPlanBuildEx(plan.h, &o) == WINNOW_STATUS_SUCCESS);
    CHECK(plan.source() == heuristic_source);
    CHECK(plan.tuning().produced_by == WINNOW_TUNING_HEURISTIC);
  }
  SECTION("TUNED_IF_PRESENT in the bucket takes the record") {
    PlanHandle plan(ctx.h, dsa_desc());
    // 3000 rows and 40000 keys fall in the buckets 4096 and 65536.
    const winnowBuildOptions_t o = options(WINNOW_TUNING_TUNED_IF_PRESENT, 3000, 40000);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowPlanBuildEx(plan.h, &o) == WINNOW_STATUS_SUCCESS);
    CHECK_THAT(plan.source(), Catch::Contains("kKeyTile = 64"));
    CHECK(plan.source() != heuristic_source);
    CHECK(plan.tuning().produced_by == WINNOW_TUNING_TUNED_IF_PRESENT);
    CHECK(plan.tuning().expected_us == 123.5);
    // Built again with HEURISTIC: back to today's plan.
    const winnowBuildOptions_t h = options(WINNOW_TUNING_HEURISTIC, 3000, 40000);
    REQUIRE(winnowPlanBuildEx(plan.h, &h) == WINNOW_STATUS_SUCCESS);
    CHECK(plan.source() == heuristic_source);
    CHECK(plan.tuning().produced_by == WINNOW_TUNING_HEURISTIC);
  }
}

TEST_CASE("policies: TUNE_ON_MISS without a GPU says it needs one", "[capi][tune]") {
  if (rt::gpu_available()) {
    WARN("WINNOW_SKIP: a GPU is present (tests/test_tune_gpu.cpp tunes there)");
    return;
  }
  TuningContext ctx;
  PlanHandle plan(ctx.h, dsa_desc());
  const winnowBuildOptions_t o = options(WINNOW_TUNING_TUNE_ON_MISS, 4096, 65536);
  REQUIRE_STATUS(winnowPlanBuildEx(plan.h, &o), WINNOW_STATUS_NO_DEVICE,
                 "WINNOW_TUNING_TUNE_ON_MISS times candidate plans on the GPU");
}
