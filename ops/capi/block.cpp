// The C API's block plan (include/winnow.h: winnowBlock*): block selection and block
// attention over ops::BlockSelectOp and ops::BlockAttentionOp.
#include <fmt/format.h>

#include <memory>
#include <utility>

#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "ops/capi/boundary.h"

using namespace winnow;
using namespace winnow::capi;

struct winnowBlockPlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::BlockSelectOp> select;
  std::unique_ptr<ops::BlockAttentionOp> attention;
};

namespace {

// The start of a per-length query on a block plan: both pointers given, and a length the
// plan takes (a positive multiple of 128 up to its max_seq_len, as at execute).
template <class Out>
void begin_length_query(const winnowBlockPlan* plan, const Out* out, const char* out_name,
                        int64_t seq_len) {
  require_non_null(plan, "plan");
  require_non_null(out, out_name);
  ops::validate_seq_len(plan->select->problem(), seq_len, "seq_len");
}

}  // namespace

extern "C" {

void winnowBlockDescInit(winnowBlockDesc_t* d) {
  if (d == nullptr) return;
  const ops::BlockProblem defaults;
  *d = winnowBlockDesc_t{};
  d->struct_size = sizeof(winnowBlockDesc_t);
  d->version = WINNOW_BLOCK_DESC_VERSION;
  d->heads = defaults.heads;
  d->kv_heads = defaults.kv_heads;
  d->head_dim = defaults.head_dim;
  d->max_seq_len = defaults.max_seq_len;
  d->arch = nullptr;
}

void winnowBlockRuleInit(winnowBlockRule_t* r) {
  if (r == nullptr) return;
  const ops::BlockSelectRule defaults;
  *r = winnowBlockRule_t{defaults.alpha, defaults.sink_blocks, defaults.local_blocks,
                         defaults.last_blocks, defaults.min_blocks};
}

winnowStatus_t winnowBlockPlanCreate(winnowContext_t ctx, const winnowBlockDesc_t* desc,
                                     winnowBlockPlan_t* plan) {
  return guarded([&] {
    begin_plan_create(ctx, desc, plan);
    check_version(desc->struct_size, sizeof(winnowBlockDesc_t), desc->version,
                  WINNOW_BLOCK_DESC_VERSION, "winnowBlockDescInit");
    ops::BlockProblem p;
    p.heads = desc->heads;
    p.kv_heads = desc->kv_heads;
    p.head_dim = desc->head_dim;
    p.max_seq_len = desc->max_seq_len;
    p.arch = target_arch(*ctx, desc->arch);
    auto made = std::make_unique<winnowBlockPlan>();
    made->ctx = ctx;
    made->select = ops::BlockSelectOp::create(p, ctx->cuda.get());
    made->attention = ops::BlockAttentionOp::create(p, ctx->cuda.get());
    *plan = made.release();
  });
}

winnowStatus_t winnowBlockPlanBuild(winnowBlockPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    plan->select->build(plan->ctx->cache, *plan->ctx->compiler);
    plan->attention->build(plan->ctx->cache, *plan->ctx->compiler);
  });
}

winnowStatus_t winnowBlockPlanGetWorkspaceSize(winnowBlockPlan_t plan, int64_t seq_len,
                                               size_t* bytes) {
  return guarded([&] {
    begin_length_query(plan, bytes, "bytes", seq_len);
    *bytes = plan->select->workspace_bytes(seq_len);
  });
}

winnowStatus_t winnowBlockIndexCapacity(winnowBlockPlan_t plan, int64_t seq_len,
                                        int64_t* entries) {
  return guarded([&] {
    begin_length_query(plan, entries, "entries", seq_len);
    *entries = ops::index_capacity(plan->select->problem(), seq_len);
  });
}

winnowStatus_t winnowBlockPlanDestroy(winnowBlockPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    delete plan;
  });
}

winnowStatus_t winnowBlockSelect(winnowBlockPlan_t plan, const winnowTensor_t* q,
                                 const winnowTensor_t* k, const winnowBlockRule_t* rule,
                                 const winnowTensor_t* out_offsets,
                                 const winnowTensor_t* out_indices, void* workspace,
                                 size_t workspace_bytes, CUstream stream) {
  return guarded([&] {
    require_non_null(plan, "plan");
    for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {out_offsets, "out_offsets"},
                           {out_indices, "out_indices"}})
      require_non_null(t, name);
    require_non_null(rule, "rule");
    const ops::BlockSelectRule r{rule->alpha, rule->sink_blocks, rule->local_blocks,
                                 rule->last_blocks, rule->min_blocks};
    plan->select->execute(to_view(*q, "q"), to_view(*k, "k"), r,
                          to_view(*out_offsets, "out_offsets"),
                          to_view(*out_indices, "out_indices"), nullptr, workspace,
                          workspace_bytes, stream);
  });
}

winnowStatus_t winnowBlockAttention(winnowBlockPlan_t plan, const winnowTensor_t* q,
                                    const winnowTensor_t* k, const winnowTensor_t* v,
                                    const winnowTensor_t* offsets, const winnowTensor_t* indices,
                                    const winnowTensor_t* out, CUstream stream) {
  return guarded([&] {
    require_non_null(plan, "plan");
    for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}, {offsets, "offsets"},
                           {indices, "indices"}, {out, "out"}})
      require_non_null(t, name);
    plan->attention->execute(to_view(*q, "q"), to_view(*k, "k"), to_view(*v, "v"),
                             to_view(*offsets, "offsets"), to_view(*indices, "indices"),
                             to_view(*out, "out"), stream);
  });
}

}  // extern "C"
