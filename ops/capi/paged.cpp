// The C API's paged plan (include/winnow.h: winnowPaged*), over ops::PagedTopkOp.
#include <fmt/format.h>

#include <memory>
#include <utility>

#include "ops/capi/boundary.h"
#include "ops/paged/paged_topk.h"

using namespace winnow;
using namespace winnow::capi;

struct winnowPagedPlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::PagedTopkOp> op;
};

extern "C" {

void winnowPagedDescInit(winnowPagedDesc_t* d) {
  if (d == nullptr) return;
  const ops::PagedProblem defaults;
  *d = winnowPagedDesc_t{};
  d->struct_size = sizeof(winnowPagedDesc_t);
  d->version = WINNOW_PAGED_DESC_VERSION;
  d->score = WINNOW_SCORE_RELU_MH;
  d->heads = defaults.heads;
  d->k = defaults.k;
  d->next_n = defaults.next_n;
  d->max_batch = defaults.max_batch;
}

winnowStatus_t winnowPagedPlanCreate(winnowContext_t ctx, const winnowPagedDesc_t* desc,
                                     winnowPagedPlan_t* plan) {
  return guarded([&] {
    begin_plan_create(ctx, desc, plan);
    check_version(desc->struct_size, sizeof(winnowPagedDesc_t), desc->version,
                  WINNOW_PAGED_DESC_VERSION, "winnowPagedDescInit");
    // The score is chosen as in winnowProblemDesc_t (relu_mh reads the cache's key scale).
    winnowProblemDesc_t score{};
    score.score = desc->score;
    score.expression = desc->expression;
    score.key_scale = 1;
    ops::PagedProblem p;
    p.score = score_program(score);
    if (desc->score == WINNOW_SCORE_EXPR) p.expression = desc->expression;
    p.heads = desc->heads;
    p.k = desc->k;
    p.next_n = desc->next_n;
    p.max_batch = desc->max_batch;
    p.max_blocks_per_seq = desc->max_blocks_per_seq;
    p.max_total_keys = desc->max_total_keys;
    p.sorted = desc->sorted != 0;
    p.key_splits = desc->key_splits;
    p.arch = target_arch(*ctx, desc->arch);
    auto made = std::make_unique<winnowPagedPlan>();
    made->ctx = ctx;
    made->op = ops::PagedTopkOp::create(p, ctx->cuda.get());
    *plan = made.release();
  });
}

winnowStatus_t winnowPagedPlanBuild(winnowPagedPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    plan->op->build(plan->ctx->cache, *plan->ctx->compiler);
  });
}

winnowStatus_t winnowPagedPlanGetWorkspaceSize(winnowPagedPlan_t plan, size_t* bytes) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(bytes, "bytes");
    *bytes = plan->op->workspace_bytes();
  });
}

winnowStatus_t winnowPagedPlanGetCounterOffset(winnowPagedPlan_t plan, size_t* offset) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(offset, "offset");
    *offset = plan->op->counter_offset();
  });
}

winnowStatus_t winnowPagedPlanDestroy(winnowPagedPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    delete plan;
  });
}

void winnowPagedCallOptionsInit(winnowPagedCallOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowPagedCallOptions_t{};
  o->struct_size = sizeof(winnowPagedCallOptions_t);
  o->version = WINNOW_PAGED_CALL_OPTIONS_VERSION;
}

winnowStatus_t winnowPagedTopk(winnowPagedPlan_t plan, const winnowTensor_t* q,
                               const winnowTensor_t* cache, const winnowTensor_t* block_table,
                               const winnowTensor_t* context_lens,
                               const winnowTensor_t* weights,
                               const winnowTensor_t* out_indices, void* workspace,
                               size_t workspace_bytes, CUstream stream) {
  return winnowPagedTopkEx(plan, q, cache, block_table, context_lens, weights, out_indices,
                           workspace, workspace_bytes, stream, nullptr);
}

winnowStatus_t winnowPagedTopkEx(winnowPagedPlan_t plan, const winnowTensor_t* q,
                                 const winnowTensor_t* cache, const winnowTensor_t* block_table,
                                 const winnowTensor_t* context_lens,
                                 const winnowTensor_t* weights,
                                 const winnowTensor_t* out_indices, void* workspace,
                                 size_t workspace_bytes, CUstream stream,
                                 const winnowPagedCallOptions_t* options) {
  return guarded([&] {
    require_non_null(plan, "plan");
    for (auto [t, name] : {std::pair{q, "q"}, {cache, "cache"}, {block_table, "block_table"},
                           {context_lens, "context_lens"}, {out_indices, "out_indices"}})
      require_non_null(t, name);
    ops::PagedInputs in;
    in.q = to_view(*q, "q");
    in.cache = to_view(*cache, "cache");
    in.block_table = to_view(*block_table, "block_table");
    in.context_lens = to_view(*context_lens, "context_lens");
    if (weights) in.weights = to_view(*weights, "weights");
    if (options) {
      check_version(options->struct_size, sizeof(winnowPagedCallOptions_t), options->version,
                    WINNOW_PAGED_CALL_OPTIONS_VERSION, "winnowPagedCallOptionsInit", "options");
      if (options->hint) in.hint = to_view(*options->hint, "hint");
    }
    plan->op->execute(in, to_view(*out_indices, "out_indices"), workspace, workspace_bytes,
                      stream);
  });
}

}  // extern "C"
