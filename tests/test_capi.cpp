// The C API's must-fail tests: every rule a caller can break gets its status and a message
// naming the field. No GPU needed: plans target sm_90a explicitly and are not built
// (except in one test), and tensors carry fake device pointers, since validation happens
// before any device access.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/ir/ir.h"
#include "ops/common/validate.h"
#include "capi_tensor.h"
#include "capi_support.h"
#include "support.h"
#include "winnow.h"

using Catch::Matchers::Contains;
using winnow::test::Context;
using winnow::test::ScopedEnv;

namespace {

struct Plan {
  winnowPlan_t h = nullptr;
  Plan() = default;
  Plan(winnowContext_t ctx, const winnowProblemDesc_t& d) {
    const winnowStatus_t s = winnowPlanCreate(ctx, &d, &h);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(s == WINNOW_STATUS_SUCCESS);
  }
  ~Plan() {
    if (h) winnowPlanDestroy(h);
  }
};

winnowProblemDesc_t dsa_desc() {  // relu_mh, 64 heads, d 128, fp8 with key scales, k 2048
  winnowProblemDesc_t d;
  winnowProblemDescInit(&d);
  d.arch = "sm_90a";
  return d;
}

winnowProblemDesc_t ip_desc() {
  winnowProblemDesc_t d = dsa_desc();
  d.score = WINNOW_SCORE_IP;
  d.heads = 1;
  d.head_dim = 64;
  d.q_dtype = WINNOW_DTYPE_FLOAT16;
  d.k_dtype = WINNOW_DTYPE_FLOAT16;
  d.k = 16;
  return d;
}

void* fake(uintptr_t address) { return reinterpret_cast<void*>(address); }

// A contiguous tensor at a fake device address.
winnowTensor_t tensor(uintptr_t address, winnowDataType_t dtype,
                      std::initializer_list<int64_t> shape) {
  return winnow::test::capi_tensor(fake(address), dtype, shape);
}

// One execute call; valid_call() makes it right for a descriptor, tests then break one rule.
struct Call {
  winnowTensor_t in[WINNOW_NUM_INPUTS] = {};
  int n_inputs = WINNOW_NUM_INPUTS;
  winnowTensor_t indices{}, scores{};
  bool pass_indices = false, pass_scores = false;
  void* workspace = fake(0x7000000);
  size_t workspace_bytes = size_t{1} << 32;
  const winnowCallOptions_t* options = nullptr;  // set: through winnowExecuteEx
  bool streamed = false;                          // through winnowExecuteStream
  const winnowStreamOptions_t* stream_options = nullptr;
  winnowStatus_t run(winnowPlan_t plan) const {
    if (streamed) {
      return winnowExecuteStream(plan, in, n_inputs, pass_indices ? &indices : nullptr,
                                 pass_scores ? &scores : nullptr, workspace, workspace_bytes,
                                 nullptr, stream_options);
    }
    if (options) {
      return winnowExecuteEx(plan, in, n_inputs, pass_indices ? &indices : nullptr,
                             pass_scores ? &scores : nullptr, workspace, workspace_bytes,
                             nullptr, options);
    }
    return winnowExecute(plan, in, n_inputs, pass_indices ? &indices : nullptr,
                         pass_scores ? &scores : nullptr, workspace, workspace_bytes, nullptr);
  }
  winnowTensor_t& q() { return in[WINNOW_INPUT_Q]; }
  winnowTensor_t& k() { return in[WINNOW_INPUT_K]; }
  winnowTensor_t& weights() { return in[WINNOW_INPUT_WEIGHTS]; }
  winnowTensor_t& key_scale() { return in[WINNOW_INPUT_KEY_SCALE]; }
  winnowTensor_t& window_start() { return in[WINNOW_INPUT_WINDOW_START]; }
  winnowTensor_t& window_end() { return in[WINNOW_INPUT_WINDOW_END]; }
  winnowTensor_t& sample_hint() { return in[WINNOW_INPUT_SAMPLE_HINT]; }
  winnowTensor_t& key_norms() { return in[WINNOW_INPUT_KEY_NORMS]; }
};

Call valid_call(const winnowProblemDesc_t& d, int64_t rows, int64_t num_keys) {
  Call c;
  c.q() = tensor(0x1000000, d.q_dtype, {rows, d.heads, d.head_dim});
  c.k() = tensor(0x2000000, d.k_dtype, {num_keys, d.head_dim});
  if (d.score == WINNOW_SCORE_RELU_MH) {
    c.weights() = tensor(0x3000000, WINNOW_DTYPE_FLOAT32, {rows, d.heads});
    if (d.key_scale) c.key_scale() = tensor(0x4000000, WINNOW_DTYPE_FLOAT32, {num_keys});
  }
  if (d.window == WINNOW_WINDOW_RANGES) {
    c.window_start() = tensor(0x5000000, WINNOW_DTYPE_INT32, {rows});
    c.window_end() = tensor(0x5100000, WINNOW_DTYPE_INT32, {rows});
  }
  if (d.mode == WINNOW_MODE_TOPK) {
    c.indices = tensor(0x6000000, WINNOW_DTYPE_INT32, {rows, d.k});
    c.pass_indices = true;
  } else {
    c.scores = tensor(0x6100000, WINNOW_DTYPE_FLOAT32, {rows, num_keys});
    c.pass_scores = true;
  }
  return c;
}

// A valid call on a plan that was never built stops after validation, at NOT_BUILT
// (or NO_DEVICE), so every must-fail case below fails for its own reason.
void require_passes_validation(const Call& c, winnowPlan_t plan) {
  const winnowStatus_t s = c.run(plan);
  INFO("last error: " << winnowGetLastError());
  REQUIRE((s == WINNOW_STATUS_NOT_BUILT || s == WINNOW_STATUS_NO_DEVICE));
  REQUIRE(std::string(winnowGetLastError()).size() > 0);
}

constexpr int64_t kRows = 4, kKeys = 4096;

}  // namespace

// ---------------------------------------------------------------------------------------
// Status strings, defaults, last error.

TEST_CASE("status strings are static, non-empty and distinct", "[capi]") {
  std::set<std::string> seen;
  for (int s = WINNOW_STATUS_SUCCESS; s <= WINNOW_STATUS_INTERNAL_ERROR; ++s) {
    const char* text = winnowGetStatusString(static_cast<winnowStatus_t>(s));
    REQUIRE(text != nullptr);
    REQUIRE(std::string(text).size() > 0);
    REQUIRE(seen.insert(text).second);
  }
  REQUIRE(std::string(winnowGetStatusString(static_cast<winnowStatus_t>(99))) == "unknown status");
  REQUIRE(seen.count("unknown status") == 0);
}

TEST_CASE("winnowProblemDescInit fills the documented defaults", "[capi]") {
  winnowProblemDesc_t d;
  winnowProblemDescInit(&d);
  REQUIRE(d.struct_size == sizeof(winnowProblemDesc_t));
  REQUIRE(d.version == WINNOW_PROBLEM_DESC_VERSION);
  REQUIRE(d.score == WINNOW_SCORE_RELU_MH);
  REQUIRE(d.heads == 64);
  REQUIRE(d.head_dim == 128);
  REQUIRE(d.q_dtype == WINNOW_DTYPE_FP8_E4M3);
  REQUIRE(d.k_dtype == WINNOW_DTYPE_FP8_E4M3);
  REQUIRE(d.key_scale == 1);
  REQUIRE(d.mode == WINNOW_MODE_TOPK);
  REQUIRE(d.k == 2048);
  REQUIRE(d.window == WINNOW_WINDOW_DENSE);
  REQUIRE(d.causal_ratio == 1);
  REQUIRE(d.arch == nullptr);
  REQUIRE(d.candidate_capacity == 0);
  REQUIRE(d.sample_size == -1);
}

TEST_CASE("the last error is per thread", "[capi]") {
  REQUIRE_STATUS(winnowCreate(nullptr, 0), WINNOW_STATUS_INVALID_ARGUMENT, "ctx");
  std::string other;
  std::thread([&] { other = winnowGetLastError(); }).join();
  REQUIRE(other.empty());
  REQUIRE_THAT(std::string(winnowGetLastError()), Contains("ctx"));
}

// ---------------------------------------------------------------------------------------
// Null handles and out-pointers.

TEST_CASE("null handles and out-pointers are refused, naming the parameter", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  winnowProblemDesc_t d = dsa_desc();
  winnowPlan_t p = nullptr;
  size_t bytes = 0;
  const char* source = nullptr;
  REQUIRE_STATUS(winnowCreate(nullptr, 0), WINNOW_STATUS_INVALID_ARGUMENT, "ctx is null");
  REQUIRE_STATUS(winnowDestroy(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "ctx is null");
  REQUIRE_STATUS(winnowPlanCreate(nullptr, &d, &p), WINNOW_STATUS_INVALID_ARGUMENT, "ctx is null");
  REQUIRE(p == nullptr);
  REQUIRE_STATUS(winnowPlanCreate(ctx.h, nullptr, &p), WINNOW_STATUS_INVALID_ARGUMENT,
                 "desc is null");
  REQUIRE_STATUS(winnowPlanCreate(ctx.h, &d, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "plan is null");
  REQUIRE_STATUS(winnowPlanBuild(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  REQUIRE_STATUS(winnowPlanGetWorkspaceSize(nullptr, &bytes), WINNOW_STATUS_INVALID_ARGUMENT,
                 "plan is null");
  REQUIRE_STATUS(winnowPlanGetWorkspaceSize(plan.h, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "bytes is null");
  REQUIRE_STATUS(winnowPlanGetCounterOffset(nullptr, &bytes), WINNOW_STATUS_INVALID_ARGUMENT,
                 "plan is null");
  REQUIRE_STATUS(winnowPlanGetCounterOffset(plan.h, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "offset is null");
  REQUIRE_STATUS(winnowPlanGetSource(nullptr, &source), WINNOW_STATUS_INVALID_ARGUMENT,
                 "plan is null");
  REQUIRE_STATUS(winnowPlanGetSource(plan.h, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "source is null");
  REQUIRE_STATUS(winnowPlanDestroy(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");

  Call c = valid_call(dsa_desc(), kRows, kKeys);
  REQUIRE_STATUS(c.run(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  REQUIRE_STATUS(winnowExecute(plan.h, nullptr, 6, &c.indices, nullptr, c.workspace,
                               c.workspace_bytes, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "inputs is null");
}

TEST_CASE("a negative device ordinal is refused", "[capi]") {
  winnowContext_t ctx = nullptr;
  REQUIRE_STATUS(winnowCreate(&ctx, -1), WINNOW_STATUS_INVALID_ARGUMENT, "device_ordinal");
  REQUIRE(ctx == nullptr);
}

TEST_CASE("winnowPlanFinishBuild refuses a null or unbuilt plan", "[capi]") {
  REQUIRE_STATUS(winnowPlanFinishBuild(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  Context ctx;
  Plan plan(ctx.h, ip_desc());
  REQUIRE_STATUS(winnowPlanFinishBuild(plan.h), WINNOW_STATUS_NOT_BUILT, "not built");
}

TEST_CASE("an unbuilt plan has no workspace size", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  size_t bytes = 0;
  const winnowStatus_t s = winnowPlanGetWorkspaceSize(plan.h, &bytes);
  INFO("last error: " << winnowGetLastError());
  REQUIRE(s == WINNOW_STATUS_NOT_BUILT);
  REQUIRE(std::string(winnowGetLastError()).size() > 0);
}

// ---------------------------------------------------------------------------------------
// The problem descriptor.

namespace {
void require_plan_refused(winnowContext_t ctx, const winnowProblemDesc_t& d, winnowStatus_t status,
                          const std::string& text) {
  winnowPlan_t p = reinterpret_cast<winnowPlan_t>(fake(0x1));  // reset to null on failure
  REQUIRE_STATUS(winnowPlanCreate(ctx, &d, &p), status, text);
  REQUIRE(p == nullptr);
}
}  // namespace

TEST_CASE("the built-in scores make plans for an explicit arch without a GPU", "[capi]") {
  Context ctx;
  for (winnowScore_t score :
       {WINNOW_SCORE_RELU_MH, WINNOW_SCORE_IP, WINNOW_SCORE_L2, WINNOW_SCORE_COSINE}) {
    winnowProblemDesc_t d = score == WINNOW_SCORE_RELU_MH ? dsa_desc() : ip_desc();
    d.score = score;
    Plan plan(ctx.h, d);
    const char* source = nullptr;
    REQUIRE(winnowPlanGetSource(plan.h, &source) == WINNOW_STATUS_SUCCESS);
    REQUIRE(source != nullptr);
  }
  winnowProblemDesc_t d = dsa_desc();
  d.score = WINNOW_SCORE_EXPR;
  d.expression = "sum_h(w[h] * relu(dot(h))) * kscale";
  Plan plan(ctx.h, d);
}

TEST_CASE("descriptor: struct_size and version", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.struct_size = 8;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "struct_size = 8");
  d = dsa_desc();
  d.struct_size = 0;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "struct_size");
  d = dsa_desc();
  d.version = 2;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "version = 2");
  d.version = 0;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "version = 0");
}

TEST_CASE("descriptor: enums out of range", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.score = static_cast<winnowScore_t>(17);
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "score = 17");
  d = dsa_desc();
  d.mode = static_cast<winnowMode_t>(5);
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "mode = 5");
  d = dsa_desc();
  d.window = static_cast<winnowWindow_t>(9);
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "window = 9");
  d = dsa_desc();
  d.output_flags = 0x10;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "output_flags");
}

TEST_CASE("descriptor: WINNOW_OUTPUT_DISTANCE is for l2 in top-k mode", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = ip_desc();
  d.output_flags = WINNOW_OUTPUT_DISTANCE;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "WINNOW_OUTPUT_DISTANCE");
  d.score = WINNOW_SCORE_COSINE;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "not WINNOW_SCORE_L2");
  d.score = WINNOW_SCORE_L2;
  d.mode = WINNOW_MODE_MATERIALIZE;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "materialize mode");
  d.mode = WINNOW_MODE_TOPK;
  d.output_flags |= WINNOW_OUTPUT_SORTED;
  Plan plan(ctx.h, d);  // l2, top-k, sorted: accepted
  // A sharded plan merges by the shards' scores: refused, and the plan is unchanged.
  REQUIRE_STATUS(winnowPlanSetShard(plan.h, 0, 1000), WINNOW_STATUS_INVALID_ARGUMENT,
                 "distance output on a sharded plan");
}

TEST_CASE("descriptor: dtypes", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.q_dtype = WINNOW_DTYPE_INVALID;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "q_dtype");
  d = dsa_desc();
  d.q_dtype = WINNOW_DTYPE_INT32;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "q_dtype");
  d = dsa_desc();
  d.k_dtype = static_cast<winnowDataType_t>(77);
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "k_dtype = 77");
}

TEST_CASE("descriptor: k = 0, negative k and k above the maximum", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.k = 0;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "k must be at least 1");
  d.k = -5;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "k must be at least 1");
  d.k = 9000;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT,
                       "k = 9000 exceeds the maximum 8192");
  d.k = 8192;  // the maximum itself is fine
  Plan plan(ctx.h, d);
}

TEST_CASE("descriptor: heads and head_dim", "[capi]") {
  Context ctx;
  for (int heads : {0, -1, 129}) {
    winnowProblemDesc_t d = dsa_desc();
    d.heads = heads;
    require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "heads = " + std::to_string(heads));
  }
  for (int dim : {0, 8, 100, 1040, 2048}) {
    winnowProblemDesc_t d = dsa_desc();
    d.head_dim = dim;
    require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT,
                         "head_dim = " + std::to_string(dim));
  }
}

TEST_CASE("descriptor: causal ratio and offset, sample size, candidate capacity", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.window = WINNOW_WINDOW_CAUSAL;
  d.causal_ratio = 0;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "causal_ratio = 0");
  d.causal_ratio = 4;
  d.causal_offset = -1;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "causal_offset = -1");
  d = dsa_desc();
  d.sample_size = -2;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "sample_size = -2");
  d = dsa_desc();
  d.candidate_capacity = -1;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "candidate_capacity = -1");
}

TEST_CASE("descriptor: tuning fields above their stated limits are refused", "[capi]") {
  Context ctx;
  std::mt19937_64 rng(winnow::test::test_seed());
  struct Field {
    int32_t winnowProblemDesc_t::*field;
    const char* name;
    int32_t limit;
  };
  const Field fields[] = {
      {&winnowProblemDesc_t::candidate_capacity, "candidate_capacity",
       WINNOW_MAX_CANDIDATE_CAPACITY},
      {&winnowProblemDesc_t::sample_size, "sample_size", WINNOW_MAX_SAMPLE_SIZE},
      {&winnowProblemDesc_t::key_splits, "key_splits", WINNOW_MAX_KEY_SPLITS},
  };
  for (const Field& f : fields) {
    INFO(f.name);
    winnowProblemDesc_t d = dsa_desc();
    d.*f.field = f.limit;  // at the limit: a plan
    { Plan ok(ctx.h, d); }
    const int32_t over = f.limit + 1 + int32_t(rng() % 1000);
    for (int32_t value : {f.limit + 1, over, INT32_MAX}) {
      d.*f.field = value;
      require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT,
                           std::string(f.name) + " = " + std::to_string(value) + " is outside ");
      CHECK_THAT(std::string(winnowGetLastError()), Contains(".." + std::to_string(f.limit)));
    }
  }
}

TEST_CASE("descriptor: fields of another window kind are not checked", "[capi]") {
  Context ctx;
  for (winnowWindow_t window : {WINNOW_WINDOW_DENSE, WINNOW_WINDOW_RANGES}) {
    winnowProblemDesc_t d = dsa_desc();
    d.window = window;
    d.causal_ratio = 0;
    d.causal_offset = -5;
    Plan plan(ctx.h, d);  // causal_ratio and causal_offset mean nothing to this window
    CHECK(plan.h != nullptr);
  }
}

TEST_CASE("descriptor: arch", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.arch = "sm_7x";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "sm_7x");
  d.arch = "";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "arch");
  d.arch = nullptr;
  if (!winnow::rt::gpu_available()) {
    ScopedEnv unforced("WINNOW_FORCE_ARCH", "");
    require_plan_refused(ctx.h, d, WINNOW_STATUS_NO_DEVICE, "pass an explicit arch");
  }
  {
    ScopedEnv forced("WINNOW_FORCE_ARCH", "sm_100a");
    Plan plan(ctx.h, d);  // the forced arch stands in for the device's
  }
  ScopedEnv forced("WINNOW_FORCE_ARCH", "sm_9");
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "WINNOW_FORCE_ARCH = \"sm_9\"");
}

TEST_CASE("descriptor: expressions", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.score = WINNOW_SCORE_EXPR;
  d.expression = nullptr;
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "expression is null");
  d.expression = "sum_h(w[h] * relu(dot(h))";  // unbalanced: ends early
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "position 25");
  d.expression = "sum_h(w[h] * bogus(dot(h)))";  // unknown function
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "position 13");
  REQUIRE_THAT(std::string(winnowGetLastError()), Contains("bogus"));
  d.expression = "";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "position 0");
  // Parses, but reads no dot product.
  d.expression = "kscale";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "score program");
  // Parses, but the verifier refuses it: head 70 of 64, h outside a reduction.
  d.expression = "dot(70)";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "70");
  d.expression = "dot(h)";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "score program");
}

TEST_CASE("descriptor: expressions over the stated limits are refused, quoted short",
          "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.score = WINNOW_SCORE_EXPR;
  // At the length limit: accepted.
  const std::string at_limit =
      "sum_h(w[h] * relu(dot(h))) * kscale" + std::string(WINNOW_MAX_EXPRESSION_BYTES - 35, ' ');
  REQUIRE(at_limit.size() == WINNOW_MAX_EXPRESSION_BYTES);
  d.expression = at_limit.c_str();
  { Plan ok(ctx.h, d); }
  // 16 MiB: refused, and the message quotes a few dozen characters, not the text.
  const std::string huge = "dot + " + std::string(16 << 20, ' ') + "dot";
  d.expression = huge.c_str();
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "WINNOW_MAX_EXPRESSION_BYTES");
  CHECK(std::strlen(winnowGetLastError()) < 200);
  // More nodes than WINNOW_MAX_EXPRESSION_NODES, in few bytes.
  std::string many = "dot";
  for (int i = 1; i < WINNOW_MAX_EXPRESSION_NODES; ++i) many += "+dot";
  d.expression = many.c_str();
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "more than 64 nodes");
  CHECK(std::strlen(winnowGetLastError()) < 300);
  // An error at the end of a long text: an excerpt around it, with the caret under it.
  const std::string long_bad = std::string(3000, ' ') + "dot * bogus(dot)";
  d.expression = long_bad.c_str();
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT, "position 3006");
  const std::string message = winnowGetLastError();
  CHECK(message.size() < 300);
  CHECK_THAT(message, Contains("...                          dot * bogus(dot)\n"));
  const size_t caret = message.find('^');
  REQUIRE(caret != std::string::npos);
  const size_t line = message.rfind('\n', caret);
  const size_t above = message.rfind('\n', line - 1);
  CHECK(message.substr(above + 1 + (caret - line - 1), 5) == "bogus");
  // A program with no dot product is quoted as the caller wrote it.
  d.expression = "1";
  require_plan_refused(ctx.h, d, WINNOW_STATUS_INVALID_ARGUMENT,
                       "program '1' reads no dot product");
}

// ---------------------------------------------------------------------------------------
// Tensors at execute.

TEST_CASE("valid calls on unbuilt plans pass validation and stop at NOT_BUILT", "[capi]") {
  Context ctx;
  SECTION("relu_mh, fp8, key scales") {
    Plan plan(ctx.h, dsa_desc());
    require_passes_validation(valid_call(dsa_desc(), kRows, kKeys), plan.h);
  }
  SECTION("relu_mh with optional scores and padded rows") {
    Plan plan(ctx.h, dsa_desc());
    Call c = valid_call(dsa_desc(), kRows, kKeys);
    c.scores = tensor(0x6100000, WINNOW_DTYPE_FLOAT32, {kRows, 2048});
    c.pass_scores = true;
    c.q().strides[0] = 64 * 128 + 16;  // padded rows stay 16-byte multiples
    c.indices.strides[0] = 2048 + 64;
    require_passes_validation(c, plan.h);
  }
  SECTION("ip with q as [rows, d] and only two inputs") {
    Plan plan(ctx.h, ip_desc());
    Call c = valid_call(ip_desc(), kRows, kKeys);
    c.q() = tensor(0x1000000, WINNOW_DTYPE_FLOAT16, {kRows, 64});
    c.n_inputs = 2;
    require_passes_validation(c, plan.h);
  }
  SECTION("ranges") {
    winnowProblemDesc_t d = dsa_desc();
    d.window = WINNOW_WINDOW_RANGES;
    Plan plan(ctx.h, d);
    require_passes_validation(valid_call(d, kRows, kKeys), plan.h);
  }
  SECTION("causal with the last window ending exactly at num_keys") {
    winnowProblemDesc_t d = dsa_desc();
    d.window = WINNOW_WINDOW_CAUSAL;
    d.causal_ratio = 4;
    d.causal_offset = 100;
    Plan plan(ctx.h, d);
    require_passes_validation(valid_call(d, kRows, 26), plan.h);  // (100 + 4) / 4 = 26
  }
  SECTION("materialize") {
    winnowProblemDesc_t d = ip_desc();
    d.mode = WINNOW_MODE_MATERIALIZE;
    Plan plan(ctx.h, d);
    require_passes_validation(valid_call(d, kRows, kKeys), plan.h);
  }
}

TEST_CASE("execute: n_inputs", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  Call c = valid_call(dsa_desc(), kRows, kKeys);
  c.n_inputs = 0;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "n_inputs = 0");
  c.n_inputs = WINNOW_NUM_INPUTS + 1;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "n_inputs = 9");
  c.n_inputs = 6;  // callers built before the sample hint slot
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_NOT_BUILT, "not built");
  c.n_inputs = 7;  // callers built before the key norms slot
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_NOT_BUILT, "not built");
  c.n_inputs = 2;  // weights and key_scale are then absent
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights missing");
}

TEST_CASE("execute with call options: per-call causal offset and counters", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.window = WINNOW_WINDOW_CAUSAL;
  d.causal_ratio = 4;
  d.causal_offset = 100;
  Plan plan(ctx.h, d);
  Call c = valid_call(d, kRows, 26);  // (100 + 4) / 4 = 26: the last window ends at num_keys
  winnowCallOptions_t o;
  winnowCallOptionsInit(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.version == WINNOW_CALL_OPTIONS_VERSION);
  CHECK(o.causal_offset == -1);
  CHECK(o.accumulate_counters == 0);
  c.options = &o;
  require_passes_validation(c, plan.h);  // the defaults: the plan's offset
  o.causal_offset = 0;                   // an earlier chunk: shorter windows
  o.accumulate_counters = 1;
  require_passes_validation(c, plan.h);
  o.causal_offset = 101;  // (101 + 4) / 4 = 26 still fits; 104 does not
  require_passes_validation(c, plan.h);
  o.causal_offset = 104;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "ends at 27, past num_keys 26");
  o.causal_offset = -2;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->causal_offset = -2 must be >= 0, or -1 for the plan's");
  o.causal_offset = -1;
  o.accumulate_counters = 2;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->accumulate_counters = 2 must be 0 or 1");
  o.accumulate_counters = 0;
  o.version = 7;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "options->version = 7");
  o.version = WINNOW_CALL_OPTIONS_VERSION;
  o.struct_size = 8;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->struct_size = 8 is smaller than");

  // A per-call offset needs a causal plan.
  Plan dense(ctx.h, dsa_desc());
  Call cd = valid_call(dsa_desc(), kRows, kKeys);
  winnowCallOptionsInit(&o);
  cd.options = &o;
  require_passes_validation(cd, dense.h);
  o.causal_offset = 0;
  REQUIRE_STATUS(cd.run(dense.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "the plan's window is not WINNOW_WINDOW_CAUSAL");
}

TEST_CASE("execute in chunks (winnowExecuteStream): options and arguments checked first",
          "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.window = WINNOW_WINDOW_CAUSAL;
  d.causal_ratio = 4;
  Plan plan(ctx.h, d);
  const int64_t rows = 4000;  // position r sees keys t < (r + 1) / 4
  Call c = valid_call(d, rows, rows / 4);
  c.streamed = true;
  winnowStreamOptions_t o;
  winnowStreamOptionsInit(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.version == WINNOW_STREAM_OPTIONS_VERSION);
  CHECK(o.chunk_rows == 0);
  CHECK(o.sample_hint == 1);
  require_passes_validation(c, plan.h);  // NULL options: the defaults
  c.stream_options = &o;
  o.chunk_rows = 1000;
  o.sample_hint = 0;
  require_passes_validation(c, plan.h);
  o.chunk_rows = -1;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->chunk_rows = -1 must be >= 0");
  o.chunk_rows = 0;
  o.sample_hint = 2;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->sample_hint = 2 must be 0 or 1");
  o.sample_hint = 1;
  o.version = 9;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "options->version = 9");
  o.version = WINNOW_STREAM_OPTIONS_VERSION;
  o.struct_size = 4;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->struct_size = 4 is smaller than");
  o.struct_size = sizeof o;
  // The whole sequence is checked before any chunk: the last row's window past the keys.
  Call past = valid_call(d, rows, rows / 4 - 1);
  past.streamed = true;
  REQUIRE_STATUS(past.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "past num_keys");
  // A missing output.
  c.pass_indices = false;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices");
  REQUIRE_STATUS(winnowExecuteStream(nullptr, c.in, c.n_inputs, nullptr, nullptr, c.workspace,
                                     c.workspace_bytes, nullptr, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "plan");
  // Materialize writes [rows, num_keys] in one launch: no chunks.
  winnowProblemDesc_t m = ip_desc();
  m.mode = WINNOW_MODE_MATERIALIZE;
  Plan mplan(ctx.h, m);
  Call cm = valid_call(m, kRows, kKeys);
  cm.streamed = true;
  REQUIRE_STATUS(cm.run(mplan.h), WINNOW_STATUS_INVALID_ARGUMENT, "top-k mode only");
}

TEST_CASE("execute: the sample hint slot", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  Call c = valid_call(dsa_desc(), kRows, kKeys);
  c.sample_hint() = tensor(0x9000000, WINNOW_DTYPE_INT32, {512});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_NOT_BUILT, "not built");  // valid
  c.sample_hint() = tensor(0x9000000, WINNOW_DTYPE_FLOAT32, {512});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "sample_hint: dtype is fp32");
  c.sample_hint() = tensor(0x9000000, WINNOW_DTYPE_INT32, {2, 256});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "sample_hint: ndim is 2");
  c.sample_hint() = tensor(0, WINNOW_DTYPE_INT32, {512});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "sample_hint: data is null");
  // k = 2048: the kernel keeps at most 2 next_pow2(k) hint keys per row, fewer than the
  // candidate capacity; one more is refused, not written past the row's list.
  c.sample_hint() = tensor(0x9000000, WINNOW_DTYPE_INT32, {4096});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_NOT_BUILT, "not built");
  c.sample_hint() = tensor(0x9000000, WINNOW_DTYPE_INT32, {4097});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "sample_hint: shape[0] is 4097, the maximum is 4096");
}

TEST_CASE("execute: q", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  const Call good = valid_call(dsa_desc(), kRows, kKeys);
  auto refused = [&](auto&& change, const std::string& text) {
    Call c = good;
    change(c.q());
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, text);
  };
  refused([](winnowTensor_t& t) { t = winnowTensor_t{}; }, "q missing");
  refused([](winnowTensor_t& t) { t.data = nullptr; }, "q: data is null");
  refused([](winnowTensor_t& t) { t.dtype = WINNOW_DTYPE_BFLOAT16; },
          "q: dtype is bf16, expected fp8_e4m3");
  refused([](winnowTensor_t& t) { t.dtype = WINNOW_DTYPE_INVALID; }, "q: dtype");
  refused([](winnowTensor_t& t) { t.dtype = static_cast<winnowDataType_t>(42); }, "q: dtype");
  refused([](winnowTensor_t& t) { t.ndim = 2; }, "q: ndim is 2");  // [rows, d] needs H == 1
  refused([](winnowTensor_t& t) { t.ndim = 4; }, "q: ndim is 4");
  refused([](winnowTensor_t& t) { t.ndim = 7; }, "q: ndim is 7");
  refused([](winnowTensor_t& t) { t.ndim = -1; }, "q: ndim is -1");
  refused([](winnowTensor_t& t) { t.shape[1] = 32; }, "q: shape[1] is 32");
  refused([](winnowTensor_t& t) { t.shape[2] = 64; }, "q: shape[2] is 64");
  refused([](winnowTensor_t& t) { t.shape[0] = -1; }, "q: shape[0] is -1");
  refused([](winnowTensor_t& t) { t.shape[0] = int64_t{1} << 31; }, "2^31");
  refused([](winnowTensor_t& t) { t.strides[2] = 2; }, "q: strides[2] is 2");
  refused([](winnowTensor_t& t) { t.strides[1] = 256; }, "q: strides[1] is 256");
  refused([](winnowTensor_t& t) { t.strides[0] = 64 * 128 - 16; }, "q: strides[0]");
  refused([](winnowTensor_t& t) { t.strides[0] = 64 * 128 + 8; }, "multiple of 16 bytes");
  refused([](winnowTensor_t& t) { t.data = fake(0x1000008); }, "16-byte aligned");
  refused([](winnowTensor_t& t) { t.device = 1; }, "q: device is 1");
}

TEST_CASE("execute: k", "[capi]") {
  Context ctx;
  Plan plan(ctx.h, dsa_desc());
  const Call good = valid_call(dsa_desc(), kRows, kKeys);
  auto refused = [&](auto&& change, const std::string& text) {
    Call c = good;
    change(c.k());
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, text);
  };
  refused([](winnowTensor_t& t) { t = winnowTensor_t{}; }, "k missing");
  refused([](winnowTensor_t& t) { t.data = nullptr; }, "k: data is null");
  refused([](winnowTensor_t& t) { t.dtype = WINNOW_DTYPE_FLOAT16; },
          "k: dtype is fp16, expected fp8_e4m3");
  refused([](winnowTensor_t& t) { t.ndim = 3; }, "k: ndim is 3");
  refused([](winnowTensor_t& t) { t.shape[1] = 256; }, "k: shape[1] is 256");
  refused([](winnowTensor_t& t) { t.shape[0] = int64_t{3} << 31; }, "2^31");
  refused([](winnowTensor_t& t) { t.strides[1] = 4; }, "k: strides[1] is 4");
  refused([](winnowTensor_t& t) { t.strides[0] = 64; }, "k: strides[0] is 64");
  refused([](winnowTensor_t& t) { t.strides[0] = 136; }, "multiple of 16 bytes");
  refused([](winnowTensor_t& t) { t.data = fake(0x2000004); }, "16-byte aligned");
  refused([](winnowTensor_t& t) { t.device = 3; }, "k: device is 3");
}

TEST_CASE("execute: weights and key_scale follow what the program reads", "[capi]") {
  Context ctx;
  SECTION("relu_mh with key scales") {
    Plan plan(ctx.h, dsa_desc());
    const Call good = valid_call(dsa_desc(), kRows, kKeys);
    Call c = good;
    c.weights() = winnowTensor_t{};
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights missing");
    c = good;
    c.weights().dtype = WINNOW_DTYPE_BFLOAT16;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights: dtype is bf16");
    c = good;
    c.weights() = tensor(0x3000000, WINNOW_DTYPE_FLOAT32, {kRows, 32});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights: shape[1] is 32");
    c = good;
    c.weights() = tensor(0x3000000, WINNOW_DTYPE_FLOAT32, {kRows + 1, 64});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights: shape[0] is 5");
    c = good;
    c.weights().strides[1] = 2;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights: strides[1]");
    c = good;
    c.weights().data = fake(0x3000002);
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "weights: data pointer");
    c = good;
    c.key_scale() = winnowTensor_t{};
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "key_scale missing");
    c = good;
    c.key_scale() = tensor(0x4000000, WINNOW_DTYPE_FLOAT32, {kKeys - 1});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "key_scale: shape[0] is 4095");
    c = good;
    c.key_scale().strides[0] = 2;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "key_scale: strides[0] is 2");
    c = good;
    c.key_scale().dtype = WINNOW_DTYPE_FLOAT16;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "key_scale: dtype");
  }
  SECTION("relu_mh without key scales") {
    winnowProblemDesc_t d = dsa_desc();
    d.key_scale = 0;
    Plan plan(ctx.h, d);
    Call c = valid_call(d, kRows, kKeys);
    require_passes_validation(c, plan.h);
    c.key_scale() = tensor(0x4000000, WINNOW_DTYPE_FLOAT32, {kKeys});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "key_scale given but the score program does not read kscale");
  }
  SECTION("ip reads neither") {
    Plan plan(ctx.h, ip_desc());
    const Call good = valid_call(ip_desc(), kRows, kKeys);
    Call c = good;
    c.weights() = tensor(0x3000000, WINNOW_DTYPE_FLOAT32, {kRows, 1});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "weights given but the score program does not read w");
    c = good;
    c.key_scale() = tensor(0x4000000, WINNOW_DTYPE_FLOAT32, {kKeys});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "key_scale given but the score program does not read kscale");
  }
}

TEST_CASE("execute: key_norms is optional where the program reads ksq, refused elsewhere",
          "[capi]") {
  Context ctx;
  for (const winnowScore_t score : {WINNOW_SCORE_L2, WINNOW_SCORE_COSINE}) {
    INFO("score " << static_cast<int>(score));
    winnowProblemDesc_t d = ip_desc();
    d.score = score;
    Plan plan(ctx.h, d);
    const Call without = valid_call(d, kRows, kKeys);
    require_passes_validation(without, plan.h);
    Call good = without;
    good.key_norms() = tensor(0x4100000, WINNOW_DTYPE_FLOAT32, {kKeys});
    require_passes_validation(good, plan.h);
    Call c = good;
    c.n_inputs = WINNOW_INPUT_KEY_NORMS;  // a caller from before the slot: summed, as before
    require_passes_validation(c, plan.h);
    auto refused = [&](auto edit, const char* message) {
      Call bad = good;
      edit(bad.key_norms());
      REQUIRE_STATUS(bad.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, message);
    };
    refused([](winnowTensor_t& t) { t = tensor(0x4100000, WINNOW_DTYPE_FLOAT32, {kKeys + 1}); },
            "key_norms: shape[0] is 4097");
    refused([](winnowTensor_t& t) { t.dtype = WINNOW_DTYPE_FLOAT16; }, "key_norms: dtype");
    refused([](winnowTensor_t& t) { t.strides[0] = 2; }, "key_norms: strides[0] is 2");
    refused([](winnowTensor_t& t) { t.data = fake(0x4100002); }, "key_norms: data pointer");
  }
  for (const winnowProblemDesc_t& d : {ip_desc(), dsa_desc()}) {
    Plan plan(ctx.h, d);
    Call c = valid_call(d, kRows, kKeys);
    c.key_norms() = tensor(0x4100000, WINNOW_DTYPE_FLOAT32, {kKeys});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "key_norms given, but the score program does not read ksq");
  }
}

TEST_CASE("execute: window arrays", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.window = WINNOW_WINDOW_RANGES;
  Plan plan(ctx.h, d);
  const Call good = valid_call(d, kRows, kKeys);
  Call c = good;
  c.window_start() = winnowTensor_t{};
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "window_start missing");
  c = good;
  c.n_inputs = 5;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "window_end missing");
  c = good;
  c.window_start().dtype = WINNOW_DTYPE_FLOAT32;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "window_start: dtype is fp32, expected int32");
  c = good;
  c.window_end() = tensor(0x5100000, WINNOW_DTYPE_INT32, {kRows * 2});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "window_end: shape[0] is 8");
  c = good;
  c.window_end().data = nullptr;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "window_end: data is null");

  Plan dense(ctx.h, dsa_desc());
  c = good;  // a dense plan does not read window arrays
  REQUIRE_STATUS(c.run(dense.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "window_start given but the window is dense");
}

TEST_CASE("execute: causal windows past the key count", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.window = WINNOW_WINDOW_CAUSAL;
  {
    Plan plan(ctx.h, d);  // m = 1, offset 0: row 3 sees keys [0, 4)
    REQUIRE_STATUS(valid_call(d, kRows, 2).run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "window of row 3 ends at 4, past num_keys 2");
  }
  d.causal_ratio = 4;
  d.causal_offset = 100;
  Plan plan(ctx.h, d);  // row 3 at position 103 sees t < 104 / 4 = 26
  REQUIRE_STATUS(valid_call(d, kRows, 25).run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                 "window of row 3 ends at 26, past num_keys 25");
}

TEST_CASE("execute: outputs", "[capi]") {
  Context ctx;
  SECTION("top-k") {
    Plan plan(ctx.h, dsa_desc());
    const Call good = valid_call(dsa_desc(), kRows, kKeys);
    Call c = good;
    c.pass_indices = false;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices missing");
    c = good;
    c.indices = winnowTensor_t{};
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices missing");
    c = good;
    c.indices.data = nullptr;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: data is null");
    c = good;
    c.indices.dtype = WINNOW_DTYPE_FLOAT32;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "out_indices: dtype is fp32, expected int32");
    c = good;
    c.indices = tensor(0x6000000, WINNOW_DTYPE_INT32, {kRows, 1024});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: shape[1] is 1024");
    c = good;
    c.indices = tensor(0x6000000, WINNOW_DTYPE_INT32, {kRows + 1, 2048});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: shape[0] is 5");
    c = good;
    c.indices.strides[1] = 2;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: strides[1] is 2");
    c = good;
    c.indices.strides[0] = 2047;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: strides[0] is 2047");
    c = good;
    c.indices.data = fake(0x6000002);
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: data pointer");
    c = good;
    c.indices.device = 2;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices: device is 2");
    c = good;
    c.pass_scores = true;
    c.scores = tensor(0x6100000, WINNOW_DTYPE_FLOAT16, {kRows, 2048});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT,
                   "out_scores: dtype is fp16, expected fp32");
    c.scores = tensor(0x6100000, WINNOW_DTYPE_FLOAT32, {kRows, kKeys});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_scores: shape[1] is 4096");
  }
  SECTION("materialize") {
    winnowProblemDesc_t d = ip_desc();
    d.mode = WINNOW_MODE_MATERIALIZE;
    Plan plan(ctx.h, d);
    const Call good = valid_call(d, kRows, kKeys);
    Call c = good;
    c.pass_scores = false;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_scores missing");
    c = good;
    c.indices = tensor(0x6000000, WINNOW_DTYPE_INT32, {kRows, 16});
    c.pass_indices = true;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_indices given");
    c = good;
    c.scores = tensor(0x6100000, WINNOW_DTYPE_FLOAT32, {kRows, 16});
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_scores: shape[1] is 16");
    c = good;
    c.scores.strides[0] = kKeys - 1;
    REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "out_scores: strides[0]");
  }
}

// ---------------------------------------------------------------------------------------
// The workspace rules, on ops::validate_call directly: an unbuilt plan has no workspace
// size, and building one needs a device.

namespace {
namespace ops = winnow::ops;

ops::TensorView view(uintptr_t address, ops::DType dtype, std::initializer_list<int64_t> shape) {
  return ops::contiguous_view(fake(address), dtype, shape);
}
}  // namespace

TEST_CASE("workspace: null, misaligned and too small", "[capi]") {
  ops::TopkProblem p;
  p.score = winnow::ir::ip();
  p.heads = 1;
  p.head_dim = 64;
  p.q_dtype = p.k_dtype = ops::DType::BF16;
  p.k = 8;
  ops::validate_problem(p);
  ops::TopkInputs in;
  in.q = view(0x100000, ops::DType::BF16, {3, 1, 64});
  in.k = view(0x200000, ops::DType::BF16, {100, 64});
  const ops::TensorView out = view(0x300000, ops::DType::I32, {3, 8});
  constexpr size_t need = 4096;

  const ops::CallShape shape = ops::validate_call(p, 0, in, &out, nullptr, fake(0x400000), need, need);
  REQUIRE(shape.rows == 3);
  REQUIRE(shape.num_keys == 100);
  // A plan that needs no workspace takes none.
  REQUIRE_NOTHROW(ops::validate_call(p, 0, in, &out, nullptr, nullptr, 0, 0));

  REQUIRE_THROWS_MATCHES(ops::validate_call(p, 0, in, &out, nullptr, nullptr, need, need),
                         ops::InvalidArgument, Catch::Matchers::Message(
                             "workspace is null, but the plan needs 4096 bytes"));
  REQUIRE_THROWS_WITH(ops::validate_call(p, 0, in, &out, nullptr, fake(0x400080), need, need),
                      Contains("workspace pointer") && Contains("256-byte aligned"));
  REQUIRE_THROWS_WITH(ops::validate_call(p, 0, in, &out, nullptr, fake(0x400000), need - 1, need),
                      Contains("workspace of 4095 bytes is smaller than the 4096 the plan needs"));
  // Its own class, so the C API can answer WINNOW_STATUS_WORKSPACE_TOO_SMALL.
  REQUIRE_THROWS_AS(ops::validate_call(p, 0, in, &out, nullptr, fake(0x400000), need - 1, need),
                    ops::WorkspaceTooSmall);
}

TEST_CASE("validate_problem: a missing score program", "[capi]") {
  ops::TopkProblem p;
  REQUIRE_THROWS_AS(ops::validate_problem(p), ops::InvalidArgument);
  REQUIRE_THROWS_WITH(ops::validate_problem(p), Contains("score program"));
}

// ---------------------------------------------------------------------------------------
// The one test that compiles: a small ip plan for sm_90a (a few seconds of NVRTC).

TEST_CASE("a small ip plan builds for sm_90a without a GPU", "[capi]") {
  winnow::test::TempDir cache_dir;
  ScopedEnv dir("WINNOW_CACHE_DIR", cache_dir.path.string());
  Context ctx;
  Plan plan(ctx.h, ip_desc());
  const winnowStatus_t built = winnowPlanBuild(plan.h);
  INFO("last error: " << winnowGetLastError());
  REQUIRE(built == WINNOW_STATUS_SUCCESS);
  // The build is whole when it returns: winnowPlanFinishBuild only confirms it.
  REQUIRE_OK(winnowPlanFinishBuild(plan.h));
  const char* source = nullptr;
  REQUIRE(winnowPlanGetSource(plan.h, &source) == WINNOW_STATUS_SUCCESS);
  REQUIRE_THAT(std::string(source), Contains("extern \"C\""));
  if (winnow::rt::gpu_available()) return;  // fake pointers must not reach a real launch
  const Call c = valid_call(ip_desc(), kRows, kKeys);
  const winnowStatus_t s = c.run(plan.h);
  INFO("last error: " << winnowGetLastError());
  REQUIRE((s == WINNOW_STATUS_NOT_BUILT || s == WINNOW_STATUS_NO_DEVICE));
  REQUIRE(std::string(winnowGetLastError()).size() > 0);
}

// ---------------------------------------------------------------------------------------
// The whole C API lifecycle on a device: build, workspace, execute, counters, and the
// workspace rules on a built plan.

TEST_CASE("C API end to end: ip top-k with sorted output and scores", "[capi][gpu]") {
  WINNOW_REQUIRE_GPU();
  WINNOW_REQUIRE_BACKEND();
  namespace rt = winnow::rt;
  winnow::test::TempDir cache_dir;
  ScopedEnv dir("WINNOW_CACHE_DIR", cache_dir.path.string());
  Context ctx;
  winnowProblemDesc_t d = ip_desc();
  d.arch = nullptr;  // the device's
  d.q_dtype = d.k_dtype = WINNOW_DTYPE_FLOAT32;
  d.k = 16;
  d.output_flags = WINNOW_OUTPUT_SORTED;
  Plan plan(ctx.h, d);
  {
    const winnowStatus_t s = winnowPlanBuild(plan.h);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(s == WINNOW_STATUS_SUCCESS);
  }
  size_t ws_bytes = 0, counters = 0;
  REQUIRE(winnowPlanGetWorkspaceSize(plan.h, &ws_bytes) == WINNOW_STATUS_SUCCESS);
  REQUIRE(winnowPlanGetCounterOffset(plan.h, &counters) == WINNOW_STATUS_SUCCESS);
  REQUIRE(counters + 8 <= ws_bytes);

  // Small integers: every dot product is exact, and ties are many.
  const int64_t rows = 8, keys = 1000, dim = d.head_dim;
  std::mt19937_64 rng(winnow::test::test_seed());
  INFO("seed " << winnow::test::test_seed());
  std::uniform_int_distribution<int> small(-2, 2);
  std::vector<float> q(rows * dim), k(keys * dim);
  for (float& x : q) x = float(small(rng));
  for (float& x : k) x = float(small(rng));
  rt::DeviceBuffer dq(q.size() * 4), dk(k.size() * 4), didx(rows * d.k * 4),
      dscores(rows * d.k * 4), dws(ws_bytes + 256);
  dq.upload(q.data(), q.size() * 4);
  dk.upload(k.data(), k.size() * 4);

  Call c;
  c.q() = tensor(dq.ptr(), WINNOW_DTYPE_FLOAT32, {rows, dim});
  c.k() = tensor(dk.ptr(), WINNOW_DTYPE_FLOAT32, {keys, dim});
  c.n_inputs = 2;
  c.indices = tensor(didx.ptr(), WINNOW_DTYPE_INT32, {rows, d.k});
  c.scores = tensor(dscores.ptr(), WINNOW_DTYPE_FLOAT32, {rows, d.k});
  c.pass_indices = c.pass_scores = true;
  c.workspace = dws.data();  // cuMemAlloc returns 256-byte aligned memory
  c.workspace_bytes = ws_bytes;

  Call bad = c;
  bad.workspace_bytes = ws_bytes - 1;
  REQUIRE_STATUS(bad.run(plan.h), WINNOW_STATUS_WORKSPACE_TOO_SMALL,
                 "workspace of " + std::to_string(ws_bytes - 1) + " bytes is smaller than the " +
                     std::to_string(ws_bytes));
  bad = c;
  bad.workspace = static_cast<char*>(dws.data()) + 128;
  REQUIRE_STATUS(bad.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "256-byte aligned");
  bad = c;
  bad.workspace = nullptr;
  REQUIRE_STATUS(bad.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "workspace is null");

  {
    const winnowStatus_t s = c.run(plan.h);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(s == WINNOW_STATUS_SUCCESS);
  }
  std::vector<int32_t> idx(rows * d.k);
  std::vector<float> scores(rows * d.k);
  uint32_t count[2] = {99, 99};
  didx.download(idx.data(), idx.size() * 4);
  dscores.download(scores.data(), scores.size() * 4);
  std::vector<char> ws(ws_bytes);
  dws.download(ws.data(), ws_bytes);
  std::memcpy(count, ws.data() + counters, sizeof count);
  REQUIRE(count[1] == 0);  // no window past num_keys

  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<float, int32_t>> want(keys);
    for (int64_t s = 0; s < keys; ++s) {
      float dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += q[r * dim + i] * k[s * dim + i];
      want[s] = {dot, int32_t(s)};
    }
    // Descending score, then the smaller index.
    std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (int i = 0; i < d.k; ++i) {
      INFO("row " << r << " rank " << i);
      REQUIRE(idx[r * d.k + i] == want[i].second);
      REQUIRE(scores[r * d.k + i] == want[i].first);
    }
  }
}

TEST_CASE("an arch before Hopper is refused as not supported", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  d.arch = "sm_80";
  winnowPlan_t plan = nullptr;
  REQUIRE_STATUS(winnowPlanCreate(ctx.h, &d, &plan), WINNOW_STATUS_NOT_SUPPORTED,
                 "sm_80 is not supported");
  CHECK(plan == nullptr);
}

TEST_CASE("only the supported archs make plans, the others are refused with the list",
          "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    d.arch = arch;
    Plan ok(ctx.h, d);
  }
  // sm_90 would silently lose wgmma; the rest are not compiled and tested here.
  for (const char* arch : {"sm_90", "sm_90f", "sm_100", "sm_100f", "sm_103a", "sm_120a", "sm_89"}) {
    INFO(arch);
    d.arch = arch;
    require_plan_refused(ctx.h, d, WINNOW_STATUS_NOT_SUPPORTED,
                         std::string("arch ") + arch + " is not supported: winnow supports sm_90a (");
    CHECK_THAT(std::string(winnowGetLastError()), Contains("and sm_100a ("));
    winnowBlockDesc_t b;
    winnowBlockDescInit(&b);
    b.arch = arch;
    winnowBlockPlan_t block = nullptr;
    REQUIRE_STATUS(winnowBlockPlanCreate(ctx.h, &b, &block), WINNOW_STATUS_NOT_SUPPORTED,
                   "supports sm_90a (");
  }
  d.arch = nullptr;
  ScopedEnv forced("WINNOW_FORCE_ARCH", "sm_90");
  require_plan_refused(ctx.h, d, WINNOW_STATUS_NOT_SUPPORTED, "arch sm_90 is not supported");
}

TEST_CASE("key_splits is read when the descriptor carries it and must be >= 0", "[capi]") {
  Context ctx;
  winnowProblemDesc_t d = dsa_desc();
  CHECK(d.key_splits == 0);
  CHECK(d.max_workspace_bytes == 0);
  d.key_splits = -1;
  winnowPlan_t plan = nullptr;
  REQUIRE_STATUS(winnowPlanCreate(ctx.h, &d, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "key_splits = -1 is outside 0..1024");
  // A descriptor from before key_splits existed (shorter) keeps the default.
  d.struct_size = offsetof(winnowProblemDesc_t, key_splits);
  Plan ok(ctx.h, d);
  CHECK(ok.h != nullptr);
}
