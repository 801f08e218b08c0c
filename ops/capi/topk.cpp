// The C API's top-k plan (include/winnow.h: winnowPlan*, winnowExecute*), over
// ops::TopkOp, its tuning and its chunked stream driver.
#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "ops/capi/boundary.h"
#include "ops/common/validate.h"
#include "ops/topk/stream_topk.h"
#include "ops/topk/topk_tuning.h"

using namespace winnow;
using namespace winnow::capi;

static_assert(WINNOW_MAX_CANDIDATE_CAPACITY == ops::kMaxCandidateCapacity &&
                  WINNOW_MAX_SAMPLE_SIZE == ops::kMaxSampleSize &&
                  WINNOW_MAX_KEY_SPLITS == ops::kMaxKeySplits,
              "include/winnow.h states the plan fields' limits");

namespace {

ops::DType desc_dtype(winnowDataType_t t, const char* field) {
  const ops::DType d = to_dtype(t);
  if (d == ops::DType::Invalid || d == ops::DType::I32 || d == ops::DType::U8)
    invalid(fmt::format("desc->{} = {} is not a score dtype: use WINNOW_DTYPE_FLOAT32, "
                        "FLOAT16, BFLOAT16 or FP8_E4M3",
                        field, static_cast<int>(t)));
  return d;
}

// winnowCallOptions_t (NULL: the defaults) as the op's CallOptions, checked against the
// plan's problem.
ops::CallOptions to_call_options(const winnowCallOptions_t* o, const ops::TopkProblem& p) {
  ops::CallOptions c;
  if (o == nullptr) return c;
  check_version(o->struct_size, sizeof(winnowCallOptions_t), o->version,
                WINNOW_CALL_OPTIONS_VERSION, "winnowCallOptionsInit", "options");
  if (o->causal_offset < -1)
    invalid(fmt::format("options->causal_offset = {} must be >= 0, or -1 for the plan's",
                        o->causal_offset));
  if (o->causal_offset >= 0 && p.window != ops::WindowKind::Causal)
    invalid(fmt::format("options->causal_offset = {} given, but the plan's window is not "
                        "WINNOW_WINDOW_CAUSAL", o->causal_offset));
  if (o->accumulate_counters != 0 && o->accumulate_counters != 1)
    invalid(fmt::format("options->accumulate_counters = {} must be 0 or 1",
                        o->accumulate_counters));
  c.causal_offset = o->causal_offset;
  c.accumulate_counters = o->accumulate_counters == 1;
  return c;
}

ops::TopkProblem to_problem(const winnowContext& ctx, const winnowProblemDesc_t& d) {
  constexpr size_t kNeeded = offsetof(winnowProblemDesc_t, sample_size) + sizeof(d.sample_size);
  check_version(d.struct_size, kNeeded, d.version, WINNOW_PROBLEM_DESC_VERSION,
                "winnowProblemDescInit");

  ops::TopkProblem p;
  p.score = score_program(d);
  if (d.score == WINNOW_SCORE_EXPR) p.expression = d.expression;  // bounded by score_program
  p.heads = d.heads;
  p.head_dim = d.head_dim;
  p.q_dtype = desc_dtype(d.q_dtype, "q_dtype");
  p.k_dtype = desc_dtype(d.k_dtype, "k_dtype");
  switch (d.mode) {
    case WINNOW_MODE_TOPK: p.mode = ops::Mode::TopK; break;
    case WINNOW_MODE_MATERIALIZE: p.mode = ops::Mode::Materialize; break;
    default: invalid(fmt::format("desc->mode = {} is not a winnowMode_t", static_cast<int>(d.mode)));
  }
  p.k = d.k;
  constexpr uint32_t kKnownFlags =
      WINNOW_OUTPUT_SORTED | WINNOW_OUTPUT_ABSOLUTE_INDICES | WINNOW_OUTPUT_DISTANCE;
  if (d.output_flags & ~kKnownFlags)
    invalid(fmt::format("desc->output_flags = {:#x} has unknown bits {:#x}", d.output_flags,
                        d.output_flags & ~kKnownFlags));
  p.sorted = (d.output_flags & WINNOW_OUTPUT_SORTED) != 0;
  p.absolute_indices = (d.output_flags & WINNOW_OUTPUT_ABSOLUTE_INDICES) != 0;
  p.negate_scores = (d.output_flags & WINNOW_OUTPUT_DISTANCE) != 0;
  if (p.negate_scores && d.score != WINNOW_SCORE_L2)
    invalid(fmt::format("desc->output_flags has WINNOW_OUTPUT_DISTANCE, but score = {} is not "
                        "WINNOW_SCORE_L2: only l2 has a distance to report",
                        static_cast<int>(d.score)));
  switch (d.window) {
    case WINNOW_WINDOW_DENSE: p.window = ops::WindowKind::Dense; break;
    case WINNOW_WINDOW_RANGES: p.window = ops::WindowKind::Ranges; break;
    case WINNOW_WINDOW_CAUSAL: p.window = ops::WindowKind::Causal; break;
    default:
      invalid(fmt::format("desc->window = {} is not a winnowWindow_t", static_cast<int>(d.window)));
  }
  // Only a causal window reads these: the others keep the defaults, whatever was passed.
  if (p.window == ops::WindowKind::Causal) {
    p.causal_ratio = d.causal_ratio;
    p.causal_offset = d.causal_offset;
  }
  p.arch = target_arch(ctx, d.arch);
  p.candidate_capacity = d.candidate_capacity;
  p.sample_size = d.sample_size;
  // A descriptor from before key_splits existed is shorter: it keeps the default.
  if (d.struct_size >= offsetof(winnowProblemDesc_t, key_splits) + sizeof(d.key_splits))
    p.key_splits = d.key_splits;
  if (d.struct_size >= offsetof(winnowProblemDesc_t, max_workspace_bytes) +
                           sizeof(d.max_workspace_bytes))
    p.max_workspace_bytes = size_t(d.max_workspace_bytes);
  return p;
}

const char* input_name(int role) {
  static const char* const names[WINNOW_NUM_INPUTS] = {"q", "k", "weights", "key_scale",
                                                        "window_start", "window_end",
                                                        "sample_hint", "key_norms"};
  return names[role];
}

// The tensors of an execute call, checked for their roles.
struct CallTensors {
  ops::TensorView views[WINNOW_NUM_INPUTS];  // trailing roles not passed are absent
  std::optional<ops::TensorView> indices, scores;
  ops::TopkInputs inputs() const {
    return ops::TopkInputs{views[WINNOW_INPUT_Q],           views[WINNOW_INPUT_K],
                           views[WINNOW_INPUT_WEIGHTS],     views[WINNOW_INPUT_KEY_SCALE],
                           views[WINNOW_INPUT_WINDOW_START], views[WINNOW_INPUT_WINDOW_END],
                           views[WINNOW_INPUT_SAMPLE_HINT],  views[WINNOW_INPUT_KEY_NORMS]};
  }
  const ops::TensorView* out_indices() const { return indices ? &*indices : nullptr; }
  const ops::TensorView* out_scores() const { return scores ? &*scores : nullptr; }
};

CallTensors call_tensors(const winnowTensor_t* inputs, int n_inputs,
                         const winnowTensor_t* out_indices, const winnowTensor_t* out_scores) {
  require_non_null(inputs, "inputs");
  if (n_inputs < 1 || n_inputs > WINNOW_NUM_INPUTS)
    invalid(fmt::format("n_inputs = {} must be in 1..{} (WINNOW_NUM_INPUTS)", n_inputs,
                        static_cast<int>(WINNOW_NUM_INPUTS)));
  CallTensors t;
  for (int i = 0; i < n_inputs; ++i) t.views[i] = to_view(inputs[i], input_name(i));
  if (out_indices) t.indices = to_view(*out_indices, "out_indices");
  if (out_scores) t.scores = to_view(*out_scores, "out_scores");
  return t;
}

// A caller's build options, checked.
winnowBuildOptions_t build_options(const winnowBuildOptions_t& o) {
  check_version(o.struct_size, sizeof(winnowBuildOptions_t), o.version,
                WINNOW_BUILD_OPTIONS_VERSION, "winnowBuildOptionsInit", "options");
  if (o.tuning_policy != WINNOW_TUNING_HEURISTIC &&
      o.tuning_policy != WINNOW_TUNING_TUNED_IF_PRESENT &&
      o.tuning_policy != WINNOW_TUNING_TUNE_ON_MISS)
    invalid(fmt::format("options->tuning_policy = {} is not a winnowTuningPolicy_t",
                        static_cast<int>(o.tuning_policy)));
  if (o.rows < 0 || o.num_keys < 0 || (o.rows == 0) != (o.num_keys == 0))
    invalid(fmt::format("options->rows = {} and num_keys = {} must both be positive (a shape) "
                        "or both 0 (none)",
                        o.rows, o.num_keys));
  if (o.tuning_policy == WINNOW_TUNING_TUNE_ON_MISS) {
    if (o.rows == 0)
      invalid("options->tuning_policy is WINNOW_TUNING_TUNE_ON_MISS, which tunes for a shape: "
              "set options->rows and options->num_keys");
    if (!(o.tune_budget_s > 0) || o.tune_budget_s > 86400)
      invalid(fmt::format("options->tune_budget_s = {} must be in (0, 86400] seconds",
                          o.tune_budget_s));
  }
  return o;
}

// Builds the plan by the policy: the database's point for the shape when the policy reads
// it and has one, else (TUNE_ON_MISS) one tuned now and stored, else the heuristic plan.
void build_with_policy(winnowPlan& plan, const winnowBuildOptions_t& o) {
  winnowContext& ctx = *plan.ctx;
  const ops::TopkProblem& base = plan.problem;
  std::unique_ptr<ops::TopkOp> tuned;
  winnowTuningPolicy_t produced_by = WINNOW_TUNING_HEURISTIC;
  double expected_us = -1;
  // Tuned plans are top-k plans of a shape; materialize mode keeps the heuristic plan.
  if (o.tuning_policy != WINNOW_TUNING_HEURISTIC && o.rows > 0 && base.mode == ops::Mode::TopK) {
    const ops::TopkShape shape{o.rows, o.num_keys};
    const rt::TuningKey key = ops::topk_tuning_key(base, ctx.cuda.get(), *ctx.compiler, shape);
    if (ctx.tuning) {
      if (auto found = ops::find_tuned_point(*ctx.tuning, key, base, ctx.cuda.get())) {
        tuned = ops::TopkOp::create(ops::with_point(base, found->point), ctx.cuda.get());
        produced_by = WINNOW_TUNING_TUNED_IF_PRESENT;
        expected_us = found->record.time_us;
      }
    }
    if (!tuned && o.tuning_policy == WINNOW_TUNING_TUNE_ON_MISS) {
      if (!ctx.cuda)
        throw StatusError{WINNOW_STATUS_NO_DEVICE,
                          "WINNOW_TUNING_TUNE_ON_MISS times candidate plans on the GPU, and this "
                          "context has none; the tuning database has no plan for this problem "
                          "and shape (use WINNOW_TUNING_TUNED_IF_PRESENT or HEURISTIC)"};
      rt::tune::Settings settings;
      settings.budget_s = o.tune_budget_s;
      const ops::TopkTuneResult r = ops::tune_topk_on_device(
          base, *ctx.cuda, ctx.cache, *ctx.compiler, shape, settings, ctx.tuning.get());
      if (!r.best) {
        std::string why = "no candidate could be timed";
        for (const rt::tune::Measurement& m : r.run.tried)
          if (!m.error.empty()) {
            why += ": " + m.error;
            break;
          }
        throw StatusError{WINNOW_STATUS_CUDA_ERROR, "tuning failed: " + why};
      }
      tuned = ops::TopkOp::create(ops::with_point(base, *r.best), ctx.cuda.get());
      produced_by = WINNOW_TUNING_TUNE_ON_MISS;
      expected_us = r.best_us;
    }
  }
  if (tuned) {
    tuned->build(ctx.cache, *ctx.compiler);
    plan.op = std::move(tuned);
  } else {
    // The plan winnowPlanCreate made: a heuristic one (or the caller's own knobs).
    if (plan.produced_by != WINNOW_TUNING_HEURISTIC) plan.op = ops::TopkOp::create(base, ctx.cuda.get());
    plan.op->build(ctx.cache, *ctx.compiler);
  }
  plan.produced_by = produced_by;
  plan.expected_us = expected_us;
}

}  // namespace

extern "C" {

void winnowProblemDescInit(winnowProblemDesc_t* d) {
  if (d == nullptr) return;
  *d = winnowProblemDesc_t{};
  d->struct_size = sizeof(winnowProblemDesc_t);
  d->version = WINNOW_PROBLEM_DESC_VERSION;
  d->score = WINNOW_SCORE_RELU_MH;
  d->expression = nullptr;
  d->heads = 64;
  d->head_dim = 128;
  d->q_dtype = WINNOW_DTYPE_FP8_E4M3;
  d->k_dtype = WINNOW_DTYPE_FP8_E4M3;
  d->key_scale = 1;
  d->mode = WINNOW_MODE_TOPK;
  d->k = 2048;
  d->output_flags = 0;
  d->window = WINNOW_WINDOW_DENSE;
  d->causal_ratio = 1;
  d->causal_offset = 0;
  d->arch = nullptr;
  d->candidate_capacity = 0;
  d->sample_size = -1;
  d->key_splits = 0;
  d->max_workspace_bytes = 0;
}

winnowStatus_t winnowPlanCreate(winnowContext_t ctx, const winnowProblemDesc_t* desc,
                                winnowPlan_t* plan) {
  return guarded([&] {
    begin_plan_create(ctx, desc, plan);
    const ops::TopkProblem problem = to_problem(*ctx, *desc);
    auto made = std::make_unique<winnowPlan>();
    made->ctx = ctx;
    made->problem = problem;
    made->op = ops::TopkOp::create(problem, ctx->cuda.get());
    *plan = made.release();
  });
}

void winnowBuildOptionsInit(winnowBuildOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowBuildOptions_t{};
  o->struct_size = sizeof(winnowBuildOptions_t);
  o->version = WINNOW_BUILD_OPTIONS_VERSION;
  o->tuning_policy = WINNOW_TUNING_TUNED_IF_PRESENT;
  o->rows = 0;
  o->num_keys = 0;
  o->tune_budget_s = 60;
}

winnowStatus_t winnowPlanBuild(winnowPlan_t plan) { return winnowPlanBuildEx(plan, nullptr); }

winnowStatus_t winnowPlanBuildEx(winnowPlan_t plan, const winnowBuildOptions_t* options) {
  return guarded([&] {
    require_non_null(plan, "plan");
    winnowBuildOptions_t o;
    winnowBuildOptionsInit(&o);
    if (options != nullptr) o = build_options(*options);
    build_with_policy(*plan, o);
  });
}

winnowStatus_t winnowPlanFinishBuild(winnowPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    if (!plan->op->built()) throw ops::NotBuilt("the plan is not built: call winnowPlanBuild");
    if (!plan->op->finish_build())
      throw StatusError{WINNOW_STATUS_COMPILE_ERROR,
                        "the plan keeps its first kernel: " + plan->op->build_state()};
  });
}

winnowStatus_t winnowPlanGetTuning(winnowPlan_t plan, winnowPlanTuning_t* tuning) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(tuning, "tuning");
    check_version(tuning->struct_size, sizeof(winnowPlanTuning_t), tuning->version,
                  WINNOW_PLAN_TUNING_VERSION, "sizeof and WINNOW_PLAN_TUNING_VERSION", "tuning");
    if (!plan->op->built()) throw ops::NotBuilt("the plan is not built: call winnowPlanBuild");
    tuning->produced_by = plan->produced_by;
    tuning->expected_us = plan->expected_us;
  });
}

winnowStatus_t winnowPlanGetWorkspaceSize(winnowPlan_t plan, size_t* bytes) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(bytes, "bytes");
    *bytes = plan->op->workspace_bytes();
  });
}

winnowStatus_t winnowPlanGetCounterOffset(winnowPlan_t plan, size_t* offset) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(offset, "offset");
    *offset = plan->op->counter_offset();
  });
}

winnowStatus_t winnowPlanGetSource(winnowPlan_t plan, const char** source) {
  return guarded([&] {
    require_non_null(plan, "plan");
    require_non_null(source, "source");
    *source = plan->op->source().c_str();
  });
}

winnowStatus_t winnowPlanDestroy(winnowPlan_t plan) {
  return guarded([&] {
    require_non_null(plan, "plan");
    delete plan;
  });
}

void winnowCallOptionsInit(winnowCallOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowCallOptions_t{};
  o->struct_size = sizeof(winnowCallOptions_t);
  o->version = WINNOW_CALL_OPTIONS_VERSION;
  o->causal_offset = -1;
  o->accumulate_counters = 0;
}

winnowStatus_t winnowExecute(winnowPlan_t plan, const winnowTensor_t* inputs, int n_inputs,
                             const winnowTensor_t* out_indices, const winnowTensor_t* out_scores,
                             void* workspace, size_t workspace_bytes, CUstream stream) {
  return winnowExecuteEx(plan, inputs, n_inputs, out_indices, out_scores, workspace,
                         workspace_bytes, stream, nullptr);
}

winnowStatus_t winnowExecuteEx(winnowPlan_t plan, const winnowTensor_t* inputs, int n_inputs,
                               const winnowTensor_t* out_indices,
                               const winnowTensor_t* out_scores, void* workspace,
                               size_t workspace_bytes, CUstream stream,
                               const winnowCallOptions_t* options) {
  return guarded([&] {
    require_non_null(plan, "plan");
    const ops::CallOptions call = to_call_options(options, plan->op->problem());
    const CallTensors t = call_tensors(inputs, n_inputs, out_indices, out_scores);
    plan->op->execute(t.inputs(), t.out_indices(), t.out_scores(), workspace, workspace_bytes,
                      stream, call);
  });
}

void winnowStreamOptionsInit(winnowStreamOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowStreamOptions_t{};
  o->struct_size = sizeof(winnowStreamOptions_t);
  o->version = WINNOW_STREAM_OPTIONS_VERSION;
  o->chunk_rows = 0;
  o->sample_hint = 1;
}

winnowStatus_t winnowExecuteStream(winnowPlan_t plan, const winnowTensor_t* inputs, int n_inputs,
                                   const winnowTensor_t* out_indices,
                                   const winnowTensor_t* out_scores, void* workspace,
                                   size_t workspace_bytes, CUstream stream,
                                   const winnowStreamOptions_t* options) {
  return guarded([&] {
    require_non_null(plan, "plan");
    winnowStreamOptions_t o;
    winnowStreamOptionsInit(&o);
    if (options) {
      check_version(options->struct_size, sizeof(winnowStreamOptions_t), options->version,
                    WINNOW_STREAM_OPTIONS_VERSION, "winnowStreamOptionsInit", "options");
      o = *options;
    }
    if (o.chunk_rows < 0)
      invalid(fmt::format("options->chunk_rows = {} must be >= 0 (0: chosen)", o.chunk_rows));
    if (o.sample_hint != 0 && o.sample_hint != 1)
      invalid(fmt::format("options->sample_hint = {} must be 0 or 1", o.sample_hint));
    const CallTensors t = call_tensors(inputs, n_inputs, out_indices, out_scores);
    ops::execute_chunked(*plan->op, o.chunk_rows, o.sample_hint == 1, t.inputs(),
                         t.out_indices(), t.out_scores(), workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
