// The block-sparse prefill entry points of the C API: descriptors, rules and tensors that
// are refused with a status and a message; plans that compile for sm_90a without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "capi_support.h"
#include "capi_tensor.h"
#include "support.h"
#include "winnow.h"

using winnow::test::Context;

namespace {

struct BlockPlan {
  winnowBlockPlan_t h = nullptr;
  BlockPlan(winnowContext_t ctx, const winnowBlockDesc_t& d) {
    const winnowStatus_t s = winnowBlockPlanCreate(ctx, &d, &h);
    INFO("last error: " << winnowGetLastError());
    REQUIRE(s == WINNOW_STATUS_SUCCESS);
  }
  ~BlockPlan() {
    if (h) winnowBlockPlanDestroy(h);
  }
};

winnowBlockDesc_t block_desc() {
  winnowBlockDesc_t d;
  winnowBlockDescInit(&d);
  d.arch = "sm_90a";
  d.max_seq_len = 4096;
  return d;
}

winnowTensor_t tensor(uintptr_t address, winnowDataType_t dtype,
                      std::initializer_list<int64_t> shape) {
  return winnow::test::capi_tensor(reinterpret_cast<void*>(address), dtype, shape);
}

// A valid block-select call for L tokens of the default shape (32 / 8 heads, d 128).
struct SelectCall {
  winnowTensor_t q, k, offsets, indices;
  winnowBlockRule_t rule;
  void* workspace = reinterpret_cast<void*>(0x7000000);
  size_t workspace_bytes = size_t{1} << 32;
  explicit SelectCall(int64_t L) {
    const int64_t nb = L / 128;
    q = tensor(0x1000000, WINNOW_DTYPE_BFLOAT16, {L, 32, 128});
    k = tensor(0x2000000, WINNOW_DTYPE_BFLOAT16, {L, 8, 128});
    offsets = tensor(0x3000000, WINNOW_DTYPE_INT32, {32 * nb + 1});
    indices = tensor(0x4000000, WINNOW_DTYPE_INT32, {32 * nb * (nb + 1) / 2});
    winnowBlockRuleInit(&rule);
  }
  winnowStatus_t run(winnowBlockPlan_t plan) const {
    return winnowBlockSelect(plan, &q, &k, &rule, &offsets, &indices, workspace, workspace_bytes,
                             nullptr);
  }
};

}  // namespace

TEST_CASE("block descriptors and rules have the documented defaults", "[capi]") {
  winnowBlockDesc_t d;
  winnowBlockDescInit(&d);
  CHECK(d.struct_size == sizeof(winnowBlockDesc_t));
  CHECK(d.version == WINNOW_BLOCK_DESC_VERSION);
  CHECK(d.heads == 32);
  CHECK(d.kv_heads == 8);
  CHECK(d.head_dim == 128);
  CHECK(d.max_seq_len == 262144);
  CHECK(d.arch == nullptr);
  winnowBlockRule_t r;
  winnowBlockRuleInit(&r);
  CHECK(r.alpha == 0.1f);
  CHECK(r.sink_blocks == 1);
  CHECK(r.local_blocks == 2);
  CHECK(r.last_blocks == 0);
  CHECK(r.min_blocks == 4);
}

TEST_CASE("block plans: bad descriptors are refused with messages", "[capi]") {
  Context ctx;
  winnowBlockPlan_t plan = nullptr;
  struct Case {
    void (*change)(winnowBlockDesc_t&);
    winnowStatus_t status;
    const char* text;
  };
  const Case cases[] = {
      {[](winnowBlockDesc_t& d) { d.version = 7; }, WINNOW_STATUS_INVALID_ARGUMENT,
       "desc->version = 7"},
      {[](winnowBlockDesc_t& d) { d.struct_size = 8; }, WINNOW_STATUS_INVALID_ARGUMENT,
       "winnowBlockDescInit"},
      {[](winnowBlockDesc_t& d) { d.kv_heads = 7; }, WINNOW_STATUS_INVALID_ARGUMENT,
       "multiple of kv_heads"},
      {[](winnowBlockDesc_t& d) { d.head_dim = 256; }, WINNOW_STATUS_NOT_SUPPORTED,
       "head_dim = 256"},
      {[](winnowBlockDesc_t& d) { d.max_seq_len = 1000; }, WINNOW_STATUS_INVALID_ARGUMENT,
       "max_seq_len = 1000"},
      {[](winnowBlockDesc_t& d) { d.arch = "sm_80"; }, WINNOW_STATUS_NOT_SUPPORTED, "sm_80"},
  };
  for (const Case& c : cases) {
    winnowBlockDesc_t d = block_desc();
    c.change(d);
    REQUIRE_STATUS(winnowBlockPlanCreate(ctx.h, &d, &plan), c.status, c.text);
  }
  REQUIRE_STATUS(winnowBlockPlanCreate(ctx.h, nullptr, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "desc is null");
  CHECK(plan == nullptr);
}

TEST_CASE("block-select calls: rules and tensors are checked before the device", "[capi]") {
  Context ctx;
  BlockPlan plan(ctx.h, block_desc());
  int64_t entries = 0;
  REQUIRE(winnowBlockIndexCapacity(plan.h, 1024, &entries) == WINNOW_STATUS_SUCCESS);
  CHECK(entries == 32 * 8 * 9 / 2);
  size_t bytes = 0;
  REQUIRE(winnowBlockPlanGetWorkspaceSize(plan.h, 1024, &bytes) == WINNOW_STATUS_SUCCESS);
  CHECK(bytes >= size_t(entries) * 4);
  // A valid call stops at NOT_BUILT (or NO_DEVICE without a GPU).
  SelectCall ok(1024);
  const winnowStatus_t s = ok.run(plan.h);
  INFO("last error: " << winnowGetLastError());
  CHECK((s == WINNOW_STATUS_NOT_BUILT || s == WINNOW_STATUS_NO_DEVICE));

  SelectCall c = ok;
  c.rule.alpha = 2.0f;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "alpha = 2");
  c = ok;
  c.rule.local_blocks = 0;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "local_blocks = 0");
  c = ok;
  c.q = tensor(0x1000000, WINNOW_DTYPE_FLOAT16, {1024, 32, 128});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "q: dtype is fp16");
  c = SelectCall(1000);
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_NOT_SUPPORTED, "multiple of the block size");
  c = SelectCall(8192);
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "max_seq_len");
  c = ok;
  c.k = tensor(0x2000000, WINNOW_DTYPE_BFLOAT16, {1024, 4, 128});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "k: shape[1] is 4");
  c = ok;
  c.indices = tensor(0x4000000, WINNOW_DTYPE_INT32, {100});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "below the capacity");
  c = ok;
  c.offsets = tensor(0x3000000, WINNOW_DTYPE_INT32, {7});
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_INVALID_ARGUMENT, "offsets: shape[0] is 7");
  c = ok;
  c.workspace_bytes = 64;
  REQUIRE_STATUS(c.run(plan.h), WINNOW_STATUS_WORKSPACE_TOO_SMALL, "needed for L = 1024");
  REQUIRE_STATUS(winnowBlockSelect(plan.h, &ok.q, &ok.k, nullptr, &ok.offsets, &ok.indices,
                                   ok.workspace, ok.workspace_bytes, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "rule is null");

  winnowTensor_t v = tensor(0x5000000, WINNOW_DTYPE_BFLOAT16, {1024, 8, 128});
  winnowTensor_t out = tensor(0x6000000, WINNOW_DTYPE_BFLOAT16, {1024, 32, 128});
  const winnowStatus_t sa =
      winnowBlockAttention(plan.h, &ok.q, &ok.k, &v, &ok.offsets, &ok.indices, &out, nullptr);
  CHECK((sa == WINNOW_STATUS_NOT_BUILT || sa == WINNOW_STATUS_NO_DEVICE));
  out = tensor(0x6000000, WINNOW_DTYPE_BFLOAT16, {1024, 8, 128});
  REQUIRE_STATUS(
      winnowBlockAttention(plan.h, &ok.q, &ok.k, &v, &ok.offsets, &ok.indices, &out, nullptr),
      WINNOW_STATUS_INVALID_ARGUMENT, "out: shape[1] is 8");
}

TEST_CASE("a block plan builds for sm_90a without a GPU", "[capi]") {
  Context ctx;
  winnowBlockDesc_t d = block_desc();
  d.head_dim = 64;
  BlockPlan plan(ctx.h, d);
  INFO("last error: " << winnowGetLastError());
  REQUIRE(winnowBlockPlanBuild(plan.h) == WINNOW_STATUS_SUCCESS);
}

TEST_CASE("block size queries take only lengths the plan takes", "[capi]") {
  Context ctx;
  winnowBlockDesc_t d = block_desc();
  d.max_seq_len = 262144;  // the default; 32 heads
  BlockPlan plan(ctx.h, d);
  std::mt19937_64 rng(winnow::test::test_seed());
  // Any valid length: the capacity of every block pair, never negative.
  const int64_t L = 128 * int64_t(1 + rng() % 2048);
  INFO("L = " << L);
  int64_t entries = -1;
  size_t bytes = 0;
  REQUIRE(winnowBlockIndexCapacity(plan.h, L, &entries) == WINNOW_STATUS_SUCCESS);
  CHECK(entries == 32 * (L / 128) * (L / 128 + 1) / 2);
  REQUIRE(winnowBlockPlanGetWorkspaceSize(plan.h, L, &bytes) == WINNOW_STATUS_SUCCESS);
  CHECK(bytes >= size_t(entries) * 4);
  REQUIRE(winnowBlockIndexCapacity(plan.h, 262144, &entries) == WINNOW_STATUS_SUCCESS);
  CHECK(entries == 32ll * 2048 * 2049 / 2);
  // Off the block grid, empty, or longer than the plan: refused, nothing written.
  struct Bad {
    int64_t seq_len;
    winnowStatus_t status;
    const char* text;
  };
  const Bad bad[] = {
      {INT64_MAX, WINNOW_STATUS_NOT_SUPPORTED, "multiple of the block size"},
      {int64_t(1) << 40, WINNOW_STATUS_INVALID_ARGUMENT, "exceeds the problem's max_seq_len = 262144"},
      {262144 + 128, WINNOW_STATUS_INVALID_ARGUMENT, "max_seq_len"},
      {127, WINNOW_STATUS_NOT_SUPPORTED, "seq_len = 127 is not a positive multiple"},
      {L + 1 + int64_t(rng() % 127), WINNOW_STATUS_NOT_SUPPORTED, "multiple of the block size 128"},
      {0, WINNOW_STATUS_NOT_SUPPORTED, "seq_len = 0"},
      {-128, WINNOW_STATUS_NOT_SUPPORTED, "seq_len = -128"},
  };
  for (const Bad& b : bad) {
    INFO("seq_len = " << b.seq_len);
    entries = -1;
    bytes = 7;
    REQUIRE_STATUS(winnowBlockIndexCapacity(plan.h, b.seq_len, &entries), b.status, b.text);
    CHECK(entries == -1);
    REQUIRE_STATUS(winnowBlockPlanGetWorkspaceSize(plan.h, b.seq_len, &bytes), b.status, b.text);
    CHECK(bytes == 7);
  }
}

TEST_CASE("block plans whose index would overflow int32 offsets are refused", "[capi]") {
  Context ctx;
  winnowBlockPlan_t plan = nullptr;
  winnowBlockDesc_t d = block_desc();
  d.max_seq_len = int64_t(1) << 40;
  REQUIRE_STATUS(winnowBlockPlanCreate(ctx.h, &d, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "more than the int32 offsets hold");
  // 32 heads: 8192 blocks (1M tokens) fit, 16384 (2M) do not.
  d.max_seq_len = 1 << 21;
  REQUIRE_STATUS(winnowBlockPlanCreate(ctx.h, &d, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "= 4295229440 entries");
  CHECK(plan == nullptr);
}
