// TUNE_ON_MISS on the GPU: winnowPlanBuildEx tunes, stores a plan whose measured time is
// the minimum of the medians it recorded, a second plan finds it (TUNED_IF_PRESENT), and
// the tuned plan's results equal the CPU reference.
#include <random>
#include <sstream>
#include <vector>

#include "capi_support.h"
#include "capi_tensor.h"
#include "runtime/tuner.h"
#include "runtime/tuning_db.h"
#include "support.h"
#include "testing/harness.h"
#include "topk_check.h"
#include "winnow.h"

using namespace winnow;

namespace {

// The median of each timed line of a record's timings ("point | timed | t1,t2,...").
std::vector<double> medians_of(const std::string& timings) {
  std::vector<double> out;
  std::istringstream lines(timings);
  std::string line;
  while (std::getline(lines, line)) {
    const auto a = line.find(" | timed | ");
    if (a == std::string::npos) continue;
    std::vector<double> xs;
    std::istringstream values(line.substr(a + 11));
    std::string v;
    while (std::getline(values, v, ',')) xs.push_back(std::stod(v));
    out.push_back(rt::tune::median(xs));
  }
  return out;
}

}  // namespace

TEST_CASE("TUNE_ON_MISS stores the fastest measured plan, which stays exact", "[gpu][tune]") {
  WINNOW_REQUIRE_GPU();
  WINNOW_REQUIRE_BACKEND();
  INFO("seed " << test::test_seed());
  test::TempDir dir;
  test::ScopedEnv cache_dir{"WINNOW_CACHE_DIR", dir.path.string()};
  test::ScopedEnv disk_on{"WINNOW_DISABLE_DISK_CACHE", nullptr};
  const int64_t rows = 256, keys = 20000;
  winnowProblemDesc_t desc;
  winnowProblemDescInit(&desc);
  desc.k = 256;
  ops::TopkProblem p;  // the same problem through the ops layer, for data and the reference
  p.score = ir::relu_mh(true);
  p.k = desc.k;

  winnowContext_t ctx = nullptr;
  REQUIRE_OK(winnowCreate(&ctx, 0));
  winnowPlan_t plan = nullptr, again = nullptr;
  REQUIRE_OK(winnowPlanCreate(ctx, &desc, &plan));
  winnowBuildOptions_t o;
  winnowBuildOptionsInit(&o);
  o.tuning_policy = WINNOW_TUNING_TUNE_ON_MISS;
  o.rows = rows;
  o.num_keys = keys;
  o.tune_budget_s = 120;
  REQUIRE_OK(winnowPlanBuildEx(plan, &o));
  winnowPlanTuning_t t{sizeof(winnowPlanTuning_t), WINNOW_PLAN_TUNING_VERSION,
                       WINNOW_TUNING_HEURISTIC, 0};
  REQUIRE_OK(winnowPlanGetTuning(plan, &t));
  CHECK(t.produced_by == WINNOW_TUNING_TUNE_ON_MISS);
  REQUIRE(t.expected_us > 0);

  // The stored record: its time is the least median among the timings it kept.
  const rt::TuningDb db(dir.path);
  const auto stored = db.list("topk");
  REQUIRE(stored.size() == 1);
  const std::vector<double> medians = medians_of(stored[0].record.timings);
  REQUIRE(medians.size() >= 2);  // the heuristic plan and at least one other
  const double least = *std::min_element(medians.begin(), medians.end());
  CHECK(stored[0].record.time_us == Approx(least).margin(1e-3));
  CHECK(t.expected_us == stored[0].record.time_us);
  CHECK(stored[0].record.heuristic_us >= stored[0].record.time_us);

  // Another plan of the same bucket finds it without tuning.
  REQUIRE_OK(winnowPlanCreate(ctx, &desc, &again));
  o.tuning_policy = WINNOW_TUNING_TUNED_IF_PRESENT;
  o.rows = rows - 1;  // same bucket
  REQUIRE_OK(winnowPlanBuildEx(again, &o));
  REQUIRE_OK(winnowPlanGetTuning(again, &t));
  CHECK(t.produced_by == WINNOW_TUNING_TUNED_IF_PRESENT);
  CHECK(t.expected_us == stored[0].record.time_us);
  REQUIRE_OK(winnowPlanDestroy(again));

  // The tuned plan's results equal the reference.
  {
    std::mt19937_64 rng(test::test_seed());
    const ops::ProblemData d = ops::random_problem(p, rows, keys, rng);
    rt::DeviceBuffer q(d.q.bytes.size()), k(d.k.bytes.size()), w(d.w.size() * 4),
        ks(d.kscale.size() * 4), idx(rows * p.k * 4), sc(rows * p.k * 4);
    q.upload(d.q.bytes.data(), q.size());
    k.upload(d.k.bytes.data(), k.size());
    w.upload(d.w.data(), w.size());
    ks.upload(d.kscale.data(), ks.size());
    size_t ws_bytes = 0;
    REQUIRE_OK(winnowPlanGetWorkspaceSize(plan, &ws_bytes));
    rt::DeviceBuffer ws(ws_bytes);
    winnowTensor_t in[WINNOW_NUM_INPUTS] = {};
    in[WINNOW_INPUT_Q] = test::capi_tensor(q.data(), WINNOW_DTYPE_FP8_E4M3, {rows, 64, 128});
    in[WINNOW_INPUT_K] = test::capi_tensor(k.data(), WINNOW_DTYPE_FP8_E4M3, {keys, 128});
    in[WINNOW_INPUT_WEIGHTS] = test::capi_tensor(w.data(), WINNOW_DTYPE_FLOAT32, {rows, 64});
    in[WINNOW_INPUT_KEY_SCALE] = test::capi_tensor(ks.data(), WINNOW_DTYPE_FLOAT32, {keys});
    winnowTensor_t oi = test::capi_tensor(idx.data(), WINNOW_DTYPE_INT32, {rows, p.k});
    winnowTensor_t os = test::capi_tensor(sc.data(), WINNOW_DTYPE_FLOAT32, {rows, p.k});
    REQUIRE_OK(winnowExecute(plan, in, WINNOW_NUM_INPUTS, &oi, &os, ws.data(), ws_bytes,
                             nullptr));
    rt::check(rt::driver().cuCtxSynchronize(), "sync");
    ops::RunResult r;
    r.indices.resize(size_t(rows * p.k));
    r.scores.resize(size_t(rows * p.k));
    idx.download(r.indices.data(), r.indices.size() * 4);
    sc.download(r.scores.data(), r.scores.size() * 4);
    test::check_against_reference(p, d, r, {0, 1, 100, 255}, false);
  }
  REQUIRE_OK(winnowPlanDestroy(plan));
  REQUIRE_OK(winnowDestroy(ctx));
}
