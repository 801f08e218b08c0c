// The C API of include/winnow.h over ops::TopkOp. Every entry point catches every
// exception and turns it into a status plus the thread's detail message.
#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "ops/common/backend_choice.h"
#include "ops/common/errors.h"
#include "ops/common/names.h"
#include "ops/common/tensor.h"
#include "ops/common/topk_op.h"
#include "ops/common/validate.h"
#include "ops/paged/paged_topk.h"
#include "ops/shard/shard_merge.h"
#include "ops/topk/stream_topk.h"
#include "ops/topk/topk_tuning.h"
#include "runtime/cuda_driver.h"
#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuning_db.h"
#include "winnow.h"

using namespace winnow;

static_assert(WINNOW_MAX_EXPRESSION_BYTES == ir::kMaxTextBytes &&
                  WINNOW_MAX_EXPRESSION_NODES == ir::kMaxNodes,
              "include/winnow.h states the IR's limits");
static_assert(WINNOW_MAX_CANDIDATE_CAPACITY == ops::kMaxCandidateCapacity &&
                  WINNOW_MAX_SAMPLE_SIZE == ops::kMaxSampleSize &&
                  WINNOW_MAX_KEY_SPLITS == ops::kMaxKeySplits,
              "include/winnow.h states the plan fields' limits");

struct winnowContext {
  int device = 0;
  std::unique_ptr<rt::Context> cuda;  // null when there is no GPU: compile only
  rt::CubinCache cache;
  std::unique_ptr<backend::Backend> compiler;
  std::unique_ptr<rt::TuningDb> tuning;  // beside the disk cache; null when that is off
  std::string compiler_text;  // "<name> <version>", for winnowContextBackend

  winnowContext(int ordinal, std::unique_ptr<rt::Context> c, std::optional<rt::DiskStore> disk,
                std::unique_ptr<backend::Backend> be)
      : device(ordinal), cuda(std::move(c)), cache(std::move(disk)), compiler(std::move(be)),
        compiler_text(compiler->name() + " " + compiler->version()) {
    if (cache.disk()) tuning = std::make_unique<rt::TuningDb>(cache.disk()->root());
  }
};

struct winnowPlan {
  winnowContext* ctx = nullptr;  // borrowed: plans are destroyed before their context
  ops::TopkProblem problem;      // as the caller described it (a tuned point replaces knobs)
  std::unique_ptr<ops::TopkOp> op;
  winnowTuningPolicy_t produced_by = WINNOW_TUNING_HEURISTIC;
  double expected_us = -1;
};

struct winnowBlockPlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::BlockSelectOp> select;
  std::unique_ptr<ops::BlockAttentionOp> attention;
};

struct winnowPagedPlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::PagedTopkOp> op;
};

struct winnowMergePlan {
  winnowContext* ctx = nullptr;  // borrowed, as for winnowPlan
  std::unique_ptr<ops::ShardMergeOp> op;
};

namespace {

thread_local std::string t_last_error;

// A status with its message, raised inside an entry point and returned at its boundary.
struct StatusError {
  winnowStatus_t status;
  std::string message;
};

[[noreturn]] void invalid(std::string msg) {
  throw StatusError{WINNOW_STATUS_INVALID_ARGUMENT, std::move(msg)};
}

template <class T>
void require_non_null(const T* p, const char* name) {
  if (p == nullptr) invalid(fmt::format("{} is null", name));
}

// The start of a plan-creating entry point: the out-pointer cleared, every pointer given.
template <class Desc, class Plan>
void begin_plan_create(winnowContext_t ctx, const Desc* desc, Plan** plan) {
  require_non_null(plan, "plan");
  *plan = nullptr;
  require_non_null(ctx, "ctx");
  require_non_null(desc, "desc");
}

// The start of a per-length query on a block plan: both pointers given, and a length the
// plan takes (a positive multiple of 128 up to its max_seq_len, as at execute).
template <class Out>
void begin_length_query(const winnowBlockPlan* plan, const Out* out, const char* out_name,
                        int64_t seq_len) {
  require_non_null(plan, "plan");
  require_non_null(out, out_name);
  ops::validate_seq_len(plan->select->problem(), seq_len, "seq_len");
}

std::string user_error_text(const ir::UserError& e) {
  if (e.position() < 0) return e.what();
  return fmt::format("{} (at position {})", e.what(), e.position());
}

// Runs one entry point's body; maps whatever it throws to a status.
template <class F>
winnowStatus_t guarded(F&& body) {
  winnowStatus_t status = WINNOW_STATUS_INTERNAL_ERROR;
  try {
    body();
    return WINNOW_STATUS_SUCCESS;
  } catch (const StatusError& e) {
    status = e.status;
    t_last_error = e.message;
  } catch (const ops::WorkspaceTooSmall& e) {
    status = WINNOW_STATUS_WORKSPACE_TOO_SMALL;
    t_last_error = e.what();
  } catch (const ops::InvalidArgument& e) {
    status = WINNOW_STATUS_INVALID_ARGUMENT;
    t_last_error = e.what();
  } catch (const ops::NotSupported& e) {
    status = WINNOW_STATUS_NOT_SUPPORTED;
    t_last_error = e.what();
  } catch (const ops::NotBuilt& e) {
    status = WINNOW_STATUS_NOT_BUILT;
    t_last_error = e.what();
  } catch (const backend::CompileError& e) {
    status = WINNOW_STATUS_COMPILE_ERROR;
    t_last_error = e.what();
  } catch (const rt::NoDevice& e) {
    status = WINNOW_STATUS_NO_DEVICE;
    t_last_error = e.what();
  } catch (const rt::CudaError& e) {
    status = WINNOW_STATUS_CUDA_ERROR;
    t_last_error = e.what();
  } catch (const ir::UserError& e) {
    status = WINNOW_STATUS_INVALID_ARGUMENT;
    t_last_error = user_error_text(e);
  } catch (const std::bad_alloc&) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = "out of host memory";
  } catch (const std::exception& e) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = fmt::format("internal error (please report it): {}", e.what());
  } catch (...) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = "internal error (please report it): unknown exception";
  }
  return status;
}

ops::DType to_dtype(winnowDataType_t t) { return ops::dtype_from_c(t); }

ops::DType desc_dtype(winnowDataType_t t, const char* field) {
  const ops::DType d = to_dtype(t);
  if (d == ops::DType::Invalid || d == ops::DType::I32 || d == ops::DType::U8)
    invalid(fmt::format("desc->{} = {} is not a score dtype: use WINNOW_DTYPE_FLOAT32, "
                        "FLOAT16, BFLOAT16 or FP8_E4M3",
                        field, static_cast<int>(t)));
  return d;
}

// The score program of a descriptor; a bad expression names the position in the text.
ir::Expr score_program(const winnowProblemDesc_t& d) {
  if (const ops::BuiltinScore* builtin = ops::find_builtin_score(d.score))
    return builtin->program(d.key_scale != 0);
  if (d.score != WINNOW_SCORE_EXPR)
    invalid(fmt::format("desc->score = {} is not a winnowScore_t", static_cast<int>(d.score)));
  if (d.expression == nullptr)
    invalid("desc->expression is null, but desc->score is WINNOW_SCORE_EXPR");
  // Reads at most one byte past the limit: the caller's string may be huge.
  const size_t length = strnlen(d.expression, WINNOW_MAX_EXPRESSION_BYTES + 1);
  if (length > WINNOW_MAX_EXPRESSION_BYTES)
    invalid(fmt::format("desc->expression is longer than the maximum {} bytes "
                        "(WINNOW_MAX_EXPRESSION_BYTES): \"{}\"",
                        WINNOW_MAX_EXPRESSION_BYTES,
                        ir::text_excerpt(std::string_view(d.expression, 64))));
  const std::string_view text(d.expression, length);
  try {
    return ir::parse(text);
  } catch (const ir::UserError& e) {
    if (e.position() < 0)
      invalid(fmt::format("expression \"{}\": {}", ir::text_excerpt(text), e.what()));
    std::string shown = ir::text_excerpt(text, e.position());
    const size_t newline = shown.find('\n');
    shown.replace(newline, 1, "\n  ");
    invalid(fmt::format("expression, position {}: {}\n  {}", e.position(), e.what(), shown));
  }
}

// The target: the caller's arch, else WINNOW_FORCE_ARCH, else the context's device.
backend::Arch target_arch(const winnowContext& ctx, const char* arch) {
  const std::optional<std::string> forced = rt::env_get("WINNOW_FORCE_ARCH");
  if (arch != nullptr || (forced && !forced->empty())) {
    const std::string text = arch != nullptr ? arch : *forced;
    const char* source = arch != nullptr ? "desc->arch" : "WINNOW_FORCE_ARCH";
    try {
      return backend::parse_arch(text);
    } catch (const std::invalid_argument& e) {
      invalid(fmt::format("{} = \"{}\": {}", source, text, e.what()));
    }
  }
  if (ctx.cuda) return ops::device_arch(*ctx.cuda);
  throw StatusError{WINNOW_STATUS_NO_DEVICE,
                    "no GPU: pass an explicit arch such as sm_90a to compile without one"};
}

// The struct_size and version of a versioned descriptor.
// `what`: the parameter's name in messages ("desc", "options").
void check_version(size_t struct_size, size_t needed, uint32_t version, uint32_t supported,
                   const char* init, const char* what = "desc") {
  if (struct_size < needed)
    invalid(fmt::format("{}->struct_size = {} is smaller than {}, the size of a version {} "
                        "descriptor (call {} first)",
                        what, struct_size, needed, supported, init));
  if (version != supported)
    invalid(fmt::format("{}->version = {} is not supported: this winnow reads version {}", what,
                        version, supported));
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

ops::TensorView to_view(const winnowTensor_t& t, const char* name) {
  ops::TensorView v;
  v.data = t.data;
  v.ndim = t.ndim;
  v.device = t.device;
  if (t.data == nullptr && t.ndim == 0) return v;  // absent
  if (t.ndim < 0 || t.ndim > WINNOW_MAX_DIMS)
    invalid(fmt::format("{}: ndim is {}, must be in 0..{}", name, t.ndim, WINNOW_MAX_DIMS));
  v.dtype = to_dtype(t.dtype);
  if (v.dtype == ops::DType::Invalid)
    invalid(fmt::format("{}: dtype = {} is not a valid winnowDataType_t", name,
                        static_cast<int>(t.dtype)));
  for (int i = 0; i < t.ndim; ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  return v;
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

uint32_t winnowGetVersion(void) { return WINNOW_VERSION_CODE; }

const char* winnowGetStatusString(winnowStatus_t status) {
  switch (status) {
    case WINNOW_STATUS_SUCCESS: return "success";
    case WINNOW_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case WINNOW_STATUS_NOT_SUPPORTED: return "not supported";
    case WINNOW_STATUS_COMPILE_ERROR: return "kernel compilation failed";
    case WINNOW_STATUS_NO_DEVICE: return "no CUDA driver or device";
    case WINNOW_STATUS_CUDA_ERROR: return "CUDA driver error";
    case WINNOW_STATUS_NOT_BUILT: return "plan not built";
    case WINNOW_STATUS_WORKSPACE_TOO_SMALL: return "workspace too small";
    case WINNOW_STATUS_INTERNAL_ERROR: return "internal error";
  }
  return "unknown status";
}

const char* winnowGetLastError(void) { return t_last_error.c_str(); }

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

winnowStatus_t winnowCreate(winnowContext_t* ctx, int device_ordinal) {
  return winnowCreateWithOptions(ctx, device_ordinal, nullptr);
}

void winnowContextOptionsInit(winnowContextOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowContextOptions_t{};
  o->struct_size = sizeof(winnowContextOptions_t);
  o->version = WINNOW_CONTEXT_OPTIONS_VERSION;
}

winnowStatus_t winnowCreateWithOptions(winnowContext_t* ctx, int device_ordinal,
                                       const winnowContextOptions_t* options) {
  return guarded([&] {
    require_non_null(ctx, "ctx");
    *ctx = nullptr;
    if (device_ordinal < 0)
      invalid(fmt::format("device_ordinal = {} must be >= 0", device_ordinal));
    const char* requested = nullptr;
    if (options) {
      check_version(options->struct_size, sizeof(winnowContextOptions_t), options->version,
                    WINNOW_CONTEXT_OPTIONS_VERSION, "winnowContextOptionsInit", "options");
      requested = options->backend;
    }
    auto compiler = ops::choose_backend(requested);
    std::unique_ptr<rt::Context> cuda;
    if (rt::gpu_available()) cuda = std::make_unique<rt::Context>(device_ordinal);
    std::optional<rt::DiskStore> disk;
    if (rt::env_get("WINNOW_DISABLE_DISK_CACHE").value_or("") != "1")
      disk.emplace(rt::default_cache_dir());
    *ctx = new winnowContext(device_ordinal, std::move(cuda), std::move(disk), std::move(compiler));
  });
}

const char* winnowContextBackend(winnowContext_t ctx) {
  return ctx ? ctx->compiler_text.c_str() : nullptr;
}

winnowStatus_t winnowDestroy(winnowContext_t ctx) {
  return guarded([&] {
    require_non_null(ctx, "ctx");
    delete ctx;
  });
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

winnowStatus_t winnowPagedTopk(winnowPagedPlan_t plan, const winnowTensor_t* q,
                               const winnowTensor_t* cache, const winnowTensor_t* block_table,
                               const winnowTensor_t* context_lens,
                               const winnowTensor_t* weights,
                               const winnowTensor_t* out_indices, void* workspace,
                               size_t workspace_bytes, CUstream stream) {
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
    plan->op->execute(in, to_view(*out_indices, "out_indices"), workspace, workspace_bytes,
                      stream);
  });
}

// ---- Sharded top-k ----

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
