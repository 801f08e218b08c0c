// The paged decode entry points of the C API: defaults, descriptors and tensors refused
// with a status and a message, a plan that compiles for sm_90a without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "capi_support.h"
#include "capi_tensor.h"
#include "support.h"
#include "winnow.h"

using winnow::test::Context;

namespace {

winnowPagedDesc_t paged_desc() {
  winnowPagedDesc_t d;
  winnowPagedDescInit(&d);
  d.arch = "sm_90a";
  d.next_n = 2;
  d.max_batch = 8;
  d.max_blocks_per_seq = 64;
  return d;
}

winnowTensor_t tensor(uintptr_t address, winnowDataType_t dtype,
                      std::initializer_list<int64_t> shape) {
  return winnow::test::capi_tensor(reinterpret_cast<void*>(address), dtype, shape);
}

struct PagedPlan {
  winnowPagedPlan_t h = nullptr;
  PagedPlan(winnowContext_t ctx, const winnowPagedDesc_t& d) {
    const winnowStatus_t s = winnowPagedPlanCreate(ctx, &d, &h);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(s == WINNOW_STATUS_SUCCESS);
  }
  ~PagedPlan() {
    if (h) winnowPagedPlanDestroy(h);
  }
};

// A valid call of 4 requests, next_n 2, 64 heads, k 2048.
struct PagedCall {
  winnowTensor_t q = tensor(0x1000000, WINNOW_DTYPE_FP8_E4M3, {4, 2, 64, 128});
  winnowTensor_t cache = tensor(0x2000000, WINNOW_DTYPE_UINT8, {100, 64, 1, 132});
  winnowTensor_t table = tensor(0x3000000, WINNOW_DTYPE_INT32, {4, 64});
  winnowTensor_t lens = tensor(0x4000000, WINNOW_DTYPE_INT32, {4});
  winnowTensor_t w = tensor(0x5000000, WINNOW_DTYPE_FLOAT32, {8, 64});
  winnowTensor_t out = tensor(0x6000000, WINNOW_DTYPE_INT32, {8, 2048});
  winnowStatus_t run(winnowPagedPlan_t plan) const {
    return winnowPagedTopk(plan, &q, &cache, &table, &lens, &w, &out,
                           reinterpret_cast<void*>(0x7000000), size_t{1} << 32, nullptr);
  }
};

std::string last_error() { return winnowGetLastError(); }

}  // namespace

TEST_CASE("paged descriptors have the documented defaults", "[capi][decode]") {
  winnowPagedDesc_t d;
  winnowPagedDescInit(&d);
  CHECK(d.struct_size == sizeof(winnowPagedDesc_t));
  CHECK(d.version == WINNOW_PAGED_DESC_VERSION);
  CHECK(d.score == WINNOW_SCORE_RELU_MH);
  CHECK(d.heads == 64);
  CHECK(d.k == 2048);
  CHECK(d.next_n == 1);
  CHECK(d.max_batch == 1);
  CHECK(d.max_blocks_per_seq == 0);
  CHECK(d.arch == nullptr);
}

TEST_CASE("paged descriptors are refused with messages", "[capi][decode]") {
  Context ctx;
  winnowPagedPlan_t plan = nullptr;
  auto refused = [&](winnowPagedDesc_t d, const char* what) {
    CHECK(winnowPagedPlanCreate(ctx.h, &d, &plan) == WINNOW_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains(what));
    CHECK(plan == nullptr);
  };
  winnowPagedDesc_t d = paged_desc();
  d.k = 0;
  refused(d, "k");
  d = paged_desc();
  d.k = 8193;
  refused(d, "8192");
  d = paged_desc();
  d.next_n = 5;
  refused(d, "next_n = 5");
  d = paged_desc();
  d.max_blocks_per_seq = 0;
  refused(d, "max_blocks_per_seq");
  d = paged_desc();
  d.version = 99;
  CHECK(winnowPagedPlanCreate(ctx.h, &d, &plan) != WINNOW_STATUS_SUCCESS);
  d = paged_desc();
  d.score = WINNOW_SCORE_EXPR;
  d.expression = "sum_h(w[h] * relu(dot(h))) * kscale +";
  refused(d, "expression");
  CHECK(winnowPagedPlanCreate(ctx.h, nullptr, &plan) == WINNOW_STATUS_INVALID_ARGUMENT);
  d = paged_desc();
  d.arch = "sm_80";
  CHECK(winnowPagedPlanCreate(ctx.h, &d, &plan) == WINNOW_STATUS_NOT_SUPPORTED);
}

TEST_CASE("paged calls are checked before anything runs", "[capi][decode]") {
  Context ctx;
  PagedPlan plan(ctx.h, paged_desc());
  PagedCall ok;
  // Valid tensors on an unbuilt plan: only then NOT_BUILT.
  CHECK(ok.run(plan.h) == WINNOW_STATUS_NOT_BUILT);
  auto refused = [&](const PagedCall& c, const char* what) {
    CHECK(c.run(plan.h) == WINNOW_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains(what));
  };
  PagedCall c = ok;
  c.q = tensor(0x1000000, WINNOW_DTYPE_FP8_E4M3, {9, 2, 64, 128});
  refused(c, "max_batch");
  c = ok;
  c.q.dtype = WINNOW_DTYPE_BFLOAT16;
  refused(c, "q: dtype");
  c = ok;
  c.cache = tensor(0x2000000, WINNOW_DTYPE_UINT8, {100, 32, 1, 132});
  refused(c, "cache: shape[1]");
  c = ok;
  c.cache.strides[0] = 8192;
  refused(c, "8448");
  c = ok;
  c.table = tensor(0x3000000, WINNOW_DTYPE_INT32, {4, 63});
  refused(c, "max_blocks_per_seq");
  c = ok;
  c.lens = tensor(0x4000000, WINNOW_DTYPE_FLOAT32, {4});
  refused(c, "context_lens: dtype");
  c = ok;
  c.lens = tensor(0x4000000, WINNOW_DTYPE_INT32, {4, 2});
  CHECK(c.run(plan.h) == WINNOW_STATUS_NOT_BUILT);  // the [B, next_n] form is taken
  c = ok;
  c.out = tensor(0x6000000, WINNOW_DTYPE_INT32, {8, 1024});
  refused(c, "out_indices: shape[1]");
  CHECK(winnowPagedTopk(plan.h, &ok.q, &ok.cache, &ok.table, nullptr, &ok.w, &ok.out, nullptr, 0,
                        nullptr) == WINNOW_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("context_lens is null"));
}

TEST_CASE("paged call options: the hint is checked with messages", "[capi][decode]") {
  winnowPagedCallOptions_t o;
  winnowPagedCallOptionsInit(&o);
  CHECK(o.struct_size == sizeof(winnowPagedCallOptions_t));
  CHECK(o.version == WINNOW_PAGED_CALL_OPTIONS_VERSION);
  CHECK(o.hint == nullptr);
  Context ctx;
  PagedPlan plan(ctx.h, paged_desc());
  const PagedCall c;
  auto run = [&](const winnowPagedCallOptions_t* options) {
    return winnowPagedTopkEx(plan.h, &c.q, &c.cache, &c.table, &c.lens, &c.w, &c.out,
                             reinterpret_cast<void*>(0x7000000), size_t{1} << 32, nullptr, options);
  };
  // Valid: no options, no hint, a hint of the output's shape, the output itself.
  CHECK(run(nullptr) == WINNOW_STATUS_NOT_BUILT);
  CHECK(run(&o) == WINNOW_STATUS_NOT_BUILT);
  winnowTensor_t hint = tensor(0x8000000, WINNOW_DTYPE_INT32, {8, 2048});
  o.hint = &hint;
  CHECK(run(&o) == WINNOW_STATUS_NOT_BUILT);
  o.hint = &c.out;
  CHECK(run(&o) == WINNOW_STATUS_NOT_BUILT);
  o.hint = &hint;
  auto refused = [&](winnowTensor_t h, const char* what) {
    hint = h;
    CHECK(run(&o) == WINNOW_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains(what));
  };
  const winnowTensor_t ok = hint;
  winnowTensor_t h = ok;
  h.dtype = WINNOW_DTYPE_FLOAT32;
  refused(h, "hint: dtype");
  refused(tensor(0x8000000, WINNOW_DTYPE_INT32, {8, 1024}), "hint: shape[1] is 1024");
  refused(tensor(0x8000000, WINNOW_DTYPE_INT32, {4, 2048}), "hint: shape[0] is 4");
  refused(tensor(0x8000000, WINNOW_DTYPE_INT32, {8 * 2048}), "hint: ndim is 1");
  h = ok;
  h.strides[1] = 2;
  refused(h, "hint: strides[1]");
  h = ok;
  h.strides[0] = 1000;
  refused(h, "hint: strides[0]");
  refused(tensor(0x8000002, WINNOW_DTYPE_INT32, {8, 2048}), "hint: data pointer");
  o.version = 99;
  CHECK(run(&o) != WINNOW_STATUS_SUCCESS);
  CHECK_THAT(last_error(), Catch::Contains("options->version = 99"));
}

TEST_CASE("a paged plan compiles for sm_90a and loads where there is a GPU", "[capi][nvrtc][decode]") {
  Context ctx;
  PagedPlan plan(ctx.h, paged_desc());
  REQUIRE(winnowPagedPlanBuild(plan.h) == WINNOW_STATUS_SUCCESS);
  size_t bytes = 0;
  if (winnow::rt::gpu_available()) {
    // On a machine with a GPU the context has its device, so the build also loaded the
    // plan (session 25's visit: the NOT_BUILT expectation failed there).
    CHECK(winnowPagedPlanGetWorkspaceSize(plan.h, &bytes) == WINNOW_STATUS_SUCCESS);
    CHECK(bytes > 0);
  } else {
    CHECK(winnowPagedPlanGetWorkspaceSize(plan.h, &bytes) == WINNOW_STATUS_NOT_BUILT);
  }
  size_t offset = 1;
  CHECK(winnowPagedPlanGetCounterOffset(plan.h, &offset) == WINNOW_STATUS_SUCCESS);
  CHECK(offset == 0);
}
