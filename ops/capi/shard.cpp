// The C API's sharded top-k (include/winnow.h: winnowPlanSetShard, winnowMerge*,
// winnowShardMerge*), over ops::ShardMergeOp.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <utility>

#include "ops/capi/boundary.h"
#include "ops/shard/shard_merge.h"

using namespace winnow;
using namespace winnow::capi;

struct winnowMergePlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::ShardMergeOp> op;
};

extern "C" {

winnowStatus_t winnowPlanSetShard(winnowPlan_t plan, int64_t key_offset, int64_t total_keys) {
  return guarded([&] {
    require_non_null(plan, "plan");
    if (plan->op->built())
      invalid("winnowPlanSetShard after winnowPlanBuild: set the shard first, then build");
    ops::TopkProblem p = plan->problem;
    p.shard_key_offset = key_offset;
    p.total_keys = total_keys;
    plan->op = ops::TopkOp::create(p, plan->ctx->cuda.get());  // validates; unchanged if not
    plan->problem = p;
  });
}

void winnowMergeDescInit(winnowMergeDesc_t* d) {
  if (d == nullptr) return;
  const ops::ShardMergeProblem defaults;
  *d = winnowMergeDesc_t{};
  d->struct_size = sizeof(winnowMergeDesc_t);
  d->version = WINNOW_MERGE_DESC_VERSION;
  d->ranks = defaults.ranks;
  d->k = defaults.k;
  d->max_rows = 0;
  d->sorted = 0;
  d->arch = nullptr;
}

winnowStatus_t winnowMergePlanCreate(winnowContext_t ctx, const winnowMergeDesc_t* desc,
                                     winnowMergePlan_t* plan) {
  return guarded([&] {
    begin_plan_create(ctx, desc, plan);
    check_version(desc->struct_size, sizeof(winnowMergeDesc_t), desc->version,
                  WINNOW_MERGE_DESC_VERSION, "winnowMergeDescInit");
    ops::ShardMergeProblem p;
    p.ranks = desc->ranks;
    p.k = desc->k;
    p.max_rows = desc->max_rows;
    p.sorted = desc->sorted != 0;
    p.arch = target_arch(*ctx, desc->arch);
    auto made = std::make_unique<winnowMergePlan>();
    made->ctx = ctx;
    made->op = ops::ShardMergeOp::create(p, ctx->cuda.get());
    *plan = made.release();
  });
}

winnowStatus_t winnowMergePlanBuild(winnowMergePlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    plan->op->build(plan->ctx->cache, *plan->ctx->compiler);
  });
}

winnowStatus_t winnowMergePlanGetWorkspaceSize(winnowMergePlan_t plan, size_t* bytes) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(bytes, "bytes");
    *bytes = plan->op->workspace_bytes();
  });
}

winnowStatus_t winnowMergePlanGetCounterOffset(winnowMergePlan_t plan, size_t* offset) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(offset, "offset");
    *offset = plan->op->counter_offset();
  });
}

winnowStatus_t winnowMergePlanDestroy(winnowMergePlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    delete plan;
  });
}

namespace {

// The common part of the two merge entry points: the tensors checked for presence.
void shard_merge(winnowMergePlan_t plan, const winnowTensor_t* local_indices,
                 const winnowTensor_t* local_scores, const ops::AllGather* gather,
                 const winnowTensor_t* out_indices, const winnowTensor_t* out_scores,
                 void* workspace, size_t workspace_bytes, CUstream stream) {
  require_non_null(plan, "plan");
  for (auto [t, name] : {std::pair{local_indices, "local_indices"}, {local_scores, "local_scores"},
                         {out_indices, "out_indices"}})
    require_non_null(t, name);
  std::optional<ops::TensorView> scores;
  if (out_scores) scores = to_view(*out_scores, "out_scores");
  plan->op->execute(to_view(*local_indices, "local_indices"),
                    to_view(*local_scores, "local_scores"), gather,
                    to_view(*out_indices, "out_indices"), scores ? &*scores : nullptr, workspace,
                    workspace_bytes, stream);
}

}  // namespace

winnowStatus_t winnowShardMerge(winnowMergePlan_t plan, const winnowTensor_t* local_indices,
                                const winnowTensor_t* local_scores,
                                winnowAllGatherFn_t all_gather, void* user,
                                const winnowTensor_t* out_indices,
                                const winnowTensor_t* out_scores, void* workspace,
                                size_t workspace_bytes, CUstream stream) {
  return guarded([&] {
    ops::AllGather gather;
    if (all_gather) {
      gather = [all_gather, user](const void* send, void* recv, size_t bytes, CUstream s) {
        const int r = all_gather(send, recv, bytes, s, user);
        if (r != 0)
          throw StatusError{WINNOW_STATUS_CUDA_ERROR,
                            fmt::format("the caller's all-gather returned {}", r)};
      };
    }
    shard_merge(plan, local_indices, local_scores, all_gather ? &gather : nullptr, out_indices,
                out_scores, workspace, workspace_bytes, stream);
  });
}

winnowStatus_t winnowShardMergeNccl(winnowMergePlan_t plan, const winnowTensor_t* local_indices,
                                    const winnowTensor_t* local_scores, void* nccl_comm,
                                    const winnowTensor_t* out_indices,
                                    const winnowTensor_t* out_scores, void* workspace,
                                    size_t workspace_bytes, CUstream stream) {
  return guarded([&] {
    require_non_null(plan, "plan");
    if (nccl_comm == nullptr) invalid("nccl_comm is null: pass this rank's ncclComm_t");
    const ops::AllGather gather = ops::nccl_all_gather(nccl_comm, plan->op->problem().ranks);
    shard_merge(plan, local_indices, local_scores, &gather, out_indices, out_scores, workspace,
                workspace_bytes, stream);
  });
}

}  // extern "C"
