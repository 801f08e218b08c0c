// The sharded top-k C API (issue 19) without a GPU: argument errors (status and message,
// no crash), the NCCL-missing path, and the merge plan's sizes.
#include <cstring>

#include "capi_support.h"

using winnow::test::Context;

namespace {

winnowProblemDesc_t ip_desc() {
  winnowProblemDesc_t d;
  winnowProblemDescInit(&d);
  d.score = WINNOW_SCORE_IP;
  d.heads = 1;
  d.head_dim = 128;
  d.q_dtype = d.k_dtype = WINNOW_DTYPE_FLOAT16;
  d.key_scale = 0;
  d.k = 64;
  d.arch = "sm_90a";
  return d;
}

winnowMergeDesc_t merge_desc() {
  winnowMergeDesc_t d;
  winnowMergeDescInit(&d);
  d.ranks = 4;
  d.k = 64;
  d.max_rows = 32;
  d.arch = "sm_90a";
  return d;
}

struct MergePlan {
  winnowMergePlan_t h = nullptr;
  explicit MergePlan(winnowContext_t ctx, const winnowMergeDesc_t& d) {
    REQUIRE_OK(winnowMergePlanCreate(ctx, &d, &h));
  }
  ~MergePlan() { winnowMergePlanDestroy(h); }
};

winnowTensor_t tensor(void* data, winnowDataType_t t, std::initializer_list<int64_t> shape) {
  winnowTensor_t x{};
  x.data = data;
  x.dtype = t;
  x.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape) x.shape[i++] = s;
  int64_t stride = 1;
  for (int j = x.ndim - 1; j >= 0; --j) {
    x.strides[j] = stride;
    stride *= x.shape[j];
  }
  return x;
}

int no_gather(const void*, void*, size_t, CUstream, void*) { return 0; }

}  // namespace

TEST_CASE("winnowPlanSetShard checks the shard and must come before the build",
          "[capi][shard]") {
  Context ctx;
  const winnowProblemDesc_t d = ip_desc();
  winnowPlan_t plan = nullptr;
  REQUIRE_OK(winnowPlanCreate(ctx.h, &d, &plan));
  REQUIRE_STATUS(winnowPlanSetShard(nullptr, 0, 10), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  REQUIRE_STATUS(winnowPlanSetShard(plan, 10, 10), WINNOW_STATUS_INVALID_ARGUMENT,
                 "shard_key_offset = 10");
  REQUIRE_STATUS(winnowPlanSetShard(plan, -3, 10), WINNOW_STATUS_INVALID_ARGUMENT,
                 "shard_key_offset = -3");
  REQUIRE_STATUS(winnowPlanSetShard(plan, 0, int64_t(1) << 31), WINNOW_STATUS_INVALID_ARGUMENT,
                 "total_keys");
  REQUIRE_STATUS(winnowPlanSetShard(plan, 4, 0), WINNOW_STATUS_INVALID_ARGUMENT,
                 "0 when not sharded");
  REQUIRE_OK(winnowPlanSetShard(plan, 500, 1000));
  REQUIRE_OK(winnowPlanSetShard(plan, 0, 0));  // unsharded again
  REQUIRE_OK(winnowPlanSetShard(plan, 999, 1000));
  REQUIRE_OK(winnowPlanBuild(plan));  // compiles only: no GPU needed
  REQUIRE_STATUS(winnowPlanSetShard(plan, 0, 1000), WINNOW_STATUS_INVALID_ARGUMENT,
                 "after winnowPlanBuild");
  winnowPlanDestroy(plan);
}

TEST_CASE("winnowMergePlanCreate refuses bad descriptors with a message", "[capi][shard]") {
  Context ctx;
  winnowMergeDesc_t d;
  winnowMergeDescInit(&d);
  CHECK(d.struct_size == sizeof(winnowMergeDesc_t));
  CHECK(d.version == WINNOW_MERGE_DESC_VERSION);
  CHECK(d.ranks == 2);
  CHECK(d.k == 2048);
  CHECK(d.max_rows == 0);
  winnowMergePlan_t plan = nullptr;
  d.arch = "sm_90a";
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &d, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "max_rows = 0");
  CHECK(plan == nullptr);
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, nullptr, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "desc is null");
  REQUIRE_STATUS(winnowMergePlanCreate(nullptr, &d, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "ctx is null");
  winnowMergeDesc_t b = merge_desc();
  b.ranks = 0;
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &b, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "ranks = 0");
  b = merge_desc();
  b.k = 9000;
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &b, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "k = 9000");
  b = merge_desc();
  b.version = 7;
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &b, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "version = 7");
  b = merge_desc();
  b.struct_size = 8;
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &b, &plan), WINNOW_STATUS_INVALID_ARGUMENT,
                 "struct_size = 8");
  b = merge_desc();
  b.arch = "sm_80";
  REQUIRE_STATUS(winnowMergePlanCreate(ctx.h, &b, &plan), WINNOW_STATUS_NOT_SUPPORTED, "sm_80");
  b = merge_desc();
  MergePlan ok(ctx.h, b);
  size_t bytes = 0, offset = 1;
  REQUIRE_OK(winnowMergePlanGetWorkspaceSize(ok.h, &bytes));
  CHECK(bytes == 256 + size_t(32) * 64 * 8 * 5);
  REQUIRE_OK(winnowMergePlanGetCounterOffset(ok.h, &offset));
  CHECK(offset == 0);
  REQUIRE_STATUS(winnowMergePlanGetWorkspaceSize(ok.h, nullptr), WINNOW_STATUS_INVALID_ARGUMENT,
                 "bytes is null");
  REQUIRE_STATUS(winnowMergePlanBuild(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  REQUIRE_STATUS(winnowMergePlanDestroy(nullptr), WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
}

TEST_CASE("winnowShardMerge: argument errors are statuses with messages", "[capi][shard]") {
  Context ctx;
  MergePlan plan(ctx.h, merge_desc());
  alignas(256) static int idx[4 * 32 * 64];
  alignas(256) static float sc[4 * 32 * 64];
  alignas(256) static unsigned char ws[256 + 32 * 64 * 8 * 5];
  winnowTensor_t li = tensor(idx, WINNOW_DTYPE_INT32, {32, 64});
  winnowTensor_t ls = tensor(sc, WINNOW_DTYPE_FLOAT32, {32, 64});
  winnowTensor_t oi = tensor(idx, WINNOW_DTYPE_INT32, {32, 64});
  REQUIRE_STATUS(winnowShardMerge(nullptr, &li, &ls, no_gather, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "plan is null");
  REQUIRE_STATUS(winnowShardMerge(plan.h, nullptr, &ls, no_gather, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "local_indices is null");
  REQUIRE_STATUS(winnowShardMerge(plan.h, &li, &ls, no_gather, nullptr, nullptr, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "out_indices is null");
  // Loopback wants [ranks, rows, k].
  REQUIRE_STATUS(winnowShardMerge(plan.h, &li, &ls, nullptr, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "[ranks, rows, k]");
  winnowTensor_t l3 = tensor(idx, WINNOW_DTYPE_INT32, {3, 32, 64});
  winnowTensor_t s3 = tensor(sc, WINNOW_DTYPE_FLOAT32, {3, 32, 64});
  REQUIRE_STATUS(winnowShardMerge(plan.h, &l3, &s3, nullptr, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "expected ranks = 4");
  winnowTensor_t wide = tensor(idx, WINNOW_DTYPE_INT32, {32, 65});
  REQUIRE_STATUS(winnowShardMerge(plan.h, &wide, &ls, no_gather, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "expected k = 64");
  winnowTensor_t bad = li;
  bad.dtype = winnowDataType_t(99);
  REQUIRE_STATUS(winnowShardMerge(plan.h, &bad, &ls, no_gather, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "not a valid winnowDataType_t");
  REQUIRE_STATUS(winnowShardMerge(plan.h, &li, &ls, no_gather, nullptr, &oi, nullptr, ws, 100,
                                  nullptr),
                 WINNOW_STATUS_WORKSPACE_TOO_SMALL, "smaller than");
  // Everything right but the plan was never built (and there is no GPU to run it).
  REQUIRE_STATUS(winnowShardMerge(plan.h, &li, &ls, no_gather, nullptr, &oi, nullptr, ws,
                                  sizeof ws, nullptr),
                 WINNOW_STATUS_NOT_BUILT, "");
}

TEST_CASE("winnowShardMergeNccl without NCCL says so, a null communicator is refused",
          "[capi][shard]") {
  Context ctx;
  MergePlan plan(ctx.h, merge_desc());
  alignas(256) static int idx[32 * 64];
  alignas(256) static float sc[32 * 64];
  alignas(256) static unsigned char ws[256 + 32 * 64 * 8 * 5];
  winnowTensor_t li = tensor(idx, WINNOW_DTYPE_INT32, {32, 64});
  winnowTensor_t ls = tensor(sc, WINNOW_DTYPE_FLOAT32, {32, 64});
  REQUIRE_STATUS(winnowShardMergeNccl(plan.h, &li, &ls, nullptr, &li, nullptr, ws, sizeof ws,
                                      nullptr),
                 WINNOW_STATUS_INVALID_ARGUMENT, "nccl_comm is null");
  // A library that cannot be there: the communicator is never touched.
  winnow::test::ScopedEnv missing("WINNOW_NCCL_LIBRARY", "/nonexistent/winnow-test/libnccl.so.2");
  int not_a_comm = 0;
  REQUIRE_STATUS(winnowShardMergeNccl(plan.h, &li, &ls, &not_a_comm, &li, nullptr, ws, sizeof ws,
                                      nullptr),
                 WINNOW_STATUS_NOT_SUPPORTED, "NCCL is not available");
  REQUIRE_THAT(std::string(winnowGetLastError()),
               Catch::Matchers::Contains("/nonexistent/winnow-test/libnccl.so.2") &&
                   Catch::Matchers::Contains("nvidia-nccl-cu13"));
}
