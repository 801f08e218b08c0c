#include "ops/common/topk_op.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/codegen/emit_cuda.h"
#include "compiler/lower/lower.h"
#include "compiler/plan/kernel_plan.h"
#include "ops/common/jit_module.h"
#include "ops/common/key_tensor_map.h"
#include "ops/common/knn_retrieval.h"
#include "ops/common/names.h"
#include "ops/common/validate.h"
#include "runtime/env.h"
#include "runtime/log.h"
#include "knn/knn_workspace.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_workspace.cuh"

namespace winnow::ops {
namespace {

// The counters sit at the start of the workspace (templates/topk/topk_workspace.cuh).
constexpr size_t kBuffersOffset = size_t(TopkWorkspace::counters_bytes());

plan::ElemType elem_type(DType t) {
  switch (t) {
    case DType::F32: return plan::ElemType::F32;
    case DType::F16: return plan::ElemType::F16;
    case DType::BF16: return plan::ElemType::BF16;
    case DType::E4M3: return plan::ElemType::E4M3;
    default: throw InvalidArgument(fmt::format("dtype {} cannot hold q or k", dtype_name(t)));
  }
}

plan::KernelSpec make_spec(const TopkProblem& p) {
  plan::KernelSpec s;
  s.heads = p.heads;
  s.head_dim = p.head_dim;
  s.q_type = elem_type(p.q_dtype);
  s.k_type = elem_type(p.k_dtype);
  s.materialize = p.mode == Mode::Materialize;
  s.k = s.materialize ? 1 : p.k;
  s.window = static_cast<plan::WindowCode>(static_cast<int>(p.window));
  s.sorted = p.sorted;
  s.absolute = p.absolute_indices;
  const ir::Uses u = ir::uses(p.score);
  s.reads_norms = u.qsq || u.ksq;
  s.allow_tensor_cores = p.allow_tensor_cores;
  s.head_sum_form = codegen::head_sum_node(p.score) != nullptr;
  s.wgmma_target = p.arch.major == 9 && p.arch.suffix == 'a';
  return s;
}

// The mean window of a call's rows, which key splits are sized from: causal row r sees
// (offset + r + 1) / m keys, so the chunk's first and last rows bound it.
int64_t mean_window(const TopkProblem& p, const CallShape& shape, int64_t causal_offset) {
  if (p.window != WindowKind::Causal || shape.rows == 0) return shape.num_keys;
  const int64_t first = std::min(shape.num_keys, (causal_offset + 1) / p.causal_ratio);
  const int64_t last = std::min(shape.num_keys, (causal_offset + shape.rows) / p.causal_ratio);
  return (first + last) / 2;
}

}  // namespace

const char* window_name(WindowKind w) {
  switch (w) {
    case WindowKind::Dense: return "dense";
    case WindowKind::Ranges: return "ranges";
    case WindowKind::Causal: return "causal";
  }
  return "unknown";
}

struct TopkOp::Impl {
  TopkProblem problem;
  const rt::Context* ctx = nullptr;
  plan::KernelSpec spec;
  plan::KernelPlan plan;
  codegen::GeneratedKernel generated;
  std::string key;
  std::vector<char> cubin;
  std::shared_ptr<const rt::LoadedKernel> kernel;
  int max_ctas = 0;  // resident CTAs on the device: the persistent grid
  size_t workspace = 0;
  size_t partials_offset = 0, block_done_offset = 0;
  // The retrieval mode (ops/common/knn_retrieval.h) when the problem suits it: then it is what
  // build() compiles and execute() runs; the plan above is not built.
  std::unique_ptr<KnnRetrieval> knn;
};

TopkOp::TopkOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TopkOp::~TopkOp() = default;

std::unique_ptr<TopkOp> TopkOp::create(const TopkProblem& p, const rt::Context* ctx) {
  validate_problem(p);
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->ctx = ctx;
  impl->problem.score = lower::lower_score(p.score, p.heads, nullptr);
  impl->spec = make_spec(impl->problem);
  const long smem_limit = ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit;
  std::string why;
  // WINNOW_TOPK_PIPELINE=1: the wgmma path's pipelined form where no knob chose (opt-in:
  // faster only where the plain form fits one CTA per SM).
  plan::PlanKnobs knobs = p.plan_knobs;
  if (knobs.pipeline == 0) {
    if (const auto v = rt::env_get("WINNOW_TOPK_PIPELINE"); v && *v == "1") knobs.pipeline = 1;
  }
  if (!plan::choose_plan(impl->spec, smem_limit, p.candidate_capacity, p.sample_size,
                         &impl->plan, &why, knobs)) {
    throw NotSupported(why);
  }
  impl->generated = codegen::emit_topk(impl->problem.score, impl->spec, impl->plan);
  if (KnnRetrieval::unsuited(impl->problem, impl->spec).empty())
    impl->knn = std::make_unique<KnnRetrieval>(impl->problem, impl->spec, ctx);
  return std::unique_ptr<TopkOp>(new TopkOp(std::move(impl)));
}

const TopkProblem& TopkOp::problem() const { return impl_->problem; }
const std::string& TopkOp::source() const {
  return impl_->knn ? impl_->knn->source() : impl_->generated.source;
}
std::string TopkOp::plan_text() const {
  return impl_->knn ? impl_->knn->plan_text() : plan::describe(impl_->spec, impl_->plan);
}
bool TopkOp::retrieval_mode() const { return impl_->knn != nullptr; }
const std::string& TopkOp::content_key() const { return impl_->key; }
bool TopkOp::built() const { return !impl_->cubin.empty(); }
const std::vector<char>& TopkOp::cubin() const { return impl_->cubin; }

backend::CompileRequest TopkOp::compile_request() const {
  if (impl_->knn) return impl_->knn->compile_request();
  return make_compile_request(impl_->generated, impl_->problem.arch, "winnow_topk");
}

std::string TopkOp::cache_program() const {
  return ir::print(impl_->problem.score) + "\n" + plan::describe(impl_->spec, impl_->plan);
}

void TopkOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& m = *impl_;
  if (m.knn) {
    m.knn->build(cache, be, &m.key, &m.cubin);
    m.workspace = m.ctx ? m.knn->workspace_bytes() : 0;
    m.max_ctas = m.knn->grid();
    return;
  }
  const CompiledModule module = compile_cached(cache, be, compile_request(), "winnow_topk",
                                              cache_program(), ir::print(m.problem.score));
  m.key = module.key;
  m.cubin = module.cubin;
  m.kernel.reset();
  m.workspace = 0;
  if (!m.ctx) return;
  m.kernel = load_entry(*m.ctx, module, m.generated.entry.c_str(), int(m.plan.smem_bytes()));
  int per_sm = m.kernel->max_blocks_per_sm(m.plan.threads);
  if (m.problem.max_ctas_per_sm > 0) per_sm = std::min(per_sm, m.problem.max_ctas_per_sm);
  if (per_sm < 1) {
    throw NotSupported(fmt::format("the kernel cannot run on this device ({} bytes of shared "
                                   "memory, {} registers per thread)",
                                   m.plan.smem_bytes(), m.kernel->num_registers()));
  }
  // Per CTA: its candidate buffers and selection lists, one part's selection per row (key
  // splits) and a done count per row block; execute splits only as far as
  // (row blocks x parts) <= CTAs.
  const TopkWorkspace layout{m.plan.rows_per_cta, m.plan.capacity, next_pow2(m.spec.k)};
  const size_t per_cta = m.spec.materialize ? 0 : size_t(layout.bytes_per_cta());
  m.max_ctas = ctas_within_workspace(m.problem.max_workspace_bytes,
                                     per_sm * m.ctx->info().sm_count, per_cta, kBuffersOffset);
  if (m.max_ctas < 1) {
    throw InvalidArgument(fmt::format(
        "max_workspace_bytes = {} is below the {} bytes that one CTA of this plan needs",
        m.problem.max_workspace_bytes, kBuffersOffset + per_cta));
  }
  m.workspace = kBuffersOffset;
  if (!m.spec.materialize) {
    m.partials_offset = size_t(layout.partials_offset(m.max_ctas));
    m.block_done_offset = size_t(layout.block_done_offset(m.max_ctas));
    m.workspace = size_t(layout.bytes(m.max_ctas));
  }
}

// The build is whole when build() returns: nothing is left to finish (the C API's
// winnowPlanFinishBuild only confirms that the plan is built; docs/decisions/0041).
bool TopkOp::finish_build() { return true; }

std::string TopkOp::build_state() const { return "full"; }

int ctas_within_workspace(size_t bound, int resident, size_t per_cta, size_t fixed) {
  if (bound == 0) return resident;
  if (bound < fixed) return 0;
  if (per_cta == 0) return resident;
  return int(std::min<size_t>(size_t(resident), (bound - fixed) / per_cta));
}

int TopkOp::key_splits_for(int64_t rows, int64_t window_keys) const {
  const Impl& m = *impl_;
  if (m.knn || m.spec.materialize || rows == 0 || m.max_ctas == 0) return 1;
  const int64_t blocks = (rows + m.plan.rows_per_cta - 1) / m.plan.rows_per_cta;
  const int64_t room = std::max<int64_t>(1, m.max_ctas / blocks);
  int64_t want = m.problem.key_splits;
  if (want == 0) {
    // Parts of at least four key tiles and twice k keys: smaller ones cost more in
    // sampling and merging than they gain.
    const int64_t min_part = std::max<int64_t>(4 * m.plan.key_tile, 2 * m.spec.k);
    want = std::max<int64_t>(1, window_keys / min_part);
  }
  return int(std::clamp<int64_t>(want, 1, room));
}

size_t TopkOp::workspace_bytes() const {
  if (!impl_->kernel && !(impl_->knn && impl_->ctx && impl_->workspace > 0))
    throw NotBuilt("the workspace size is known once the plan is built on a device");
  return impl_->workspace;
}

size_t TopkOp::counter_offset() const { return 0; }
int64_t TopkOp::max_sample_hint() const {
  // The retrieval mode samples the corpus itself: a hint is accepted and ignored.
  if (impl_->knn) return impl_->knn->hint_limit();
  // The kernel keeps the hint's keys in a row's selection list (2 next_pow2(k) ints).
  return std::min<int64_t>(impl_->plan.capacity, 2 * int64_t(next_pow2(impl_->spec.k)));
}
int TopkOp::max_ctas() const { return impl_->max_ctas; }
const plan::KernelPlan& TopkOp::kernel_plan() const { return impl_->plan; }
int TopkOp::rows_per_cta() const {
  return impl_->knn ? winnow::kKnnQueries : impl_->plan.rows_per_cta;
}

std::string TopkOp::launch_info() const {
  const Impl& m = *impl_;
  if (m.knn) return m.knn->launch_info();
  if (!m.kernel) return "not loaded";
  const int sms = m.ctx->info().sm_count;
  return fmt::format("{} CTAs/SM x {} SMs, {} registers, {} bytes of shared memory, "
                     "{} rows per CTA, key tile {}, {}",
                     m.max_ctas / sms, sms, m.kernel->num_registers(), m.plan.smem_bytes(),
                     m.plan.rows_per_cta, m.plan.key_tile,
                     m.plan.mma == 0     ? "CUDA-core dots"
                     : m.plan.wgmma      ? "wgmma, head sums from the accumulators"
                     : m.plan.head_sums  ? "mma.sync, head sums in registers"
                                         : "mma.sync dots");
}

void TopkOp::execute(const TopkInputs& in, const TensorView* out_indices,
                     const TensorView* out_scores, void* workspace, size_t workspace_bytes,
                     CUstream stream, const CallOptions& options) const {
  const Impl& m = *impl_;
  const int device = m.ctx ? m.ctx->info().ordinal : 0;
  const int64_t causal_offset =
      options.causal_offset >= 0 ? options.causal_offset : m.problem.causal_offset;
  const CallShape shape =
      validate_call(m.problem, device, in, out_indices, out_scores, workspace, workspace_bytes,
                    m.workspace, causal_offset, m.spec.materialize ? 0 : max_sample_hint());
  if (m.knn) {
    if (!m.ctx || m.workspace == 0) throw_not_built(!m.cubin.empty());
    m.ctx->bind();
    m.knn->execute(in, shape, out_indices, out_scores, workspace, stream, options);
    return;
  }
  if (!m.kernel) throw_not_built(!m.cubin.empty());
  m.ctx->bind();
  const rt::DriverApi& cu = rt::driver();
  TopkParams p{};
  p.q = in.q.data;
  p.q_row_stride = in.q.strides[0];
  p.k = in.k.data;
  p.k_row_stride = in.k.strides[0];
  if (in.weights.present()) {
    p.w = static_cast<const float*>(in.weights.data);
    p.w_row_stride = in.weights.strides[0];
  }
  if (in.key_scale.present()) p.kscale = static_cast<const float*>(in.key_scale.data);
  if (in.key_norms.present()) p.ksq = static_cast<const float*>(in.key_norms.data);
  if (in.window_start.present()) p.window_start = static_cast<const int*>(in.window_start.data);
  if (in.window_end.present()) p.window_end = static_cast<const int*>(in.window_end.data);
  if (in.sample_hint.present() && in.sample_hint.shape[0] > 0) {
    p.sample_hint = static_cast<const int*>(in.sample_hint.data);
    p.sample_hint_count = int(in.sample_hint.shape[0]);
  }
  if (out_indices && out_indices->present()) {
    p.out_indices = static_cast<int*>(out_indices->data);
    p.out_indices_stride = out_indices->strides[0];
  }
  if (out_scores && out_scores->present()) {
    p.out_scores = static_cast<float*>(out_scores->data);
    p.out_scores_stride = out_scores->strides[0];
  }
  p.negate_scores = m.problem.negate_scores ? 1 : 0;
  p.rows = int(shape.rows);
  p.num_keys = int(shape.num_keys);
  p.causal_offset = causal_offset;
  p.causal_ratio = m.problem.causal_ratio;
  p.key_offset = int(m.problem.shard_key_offset);
  p.total_keys = m.problem.sharded() ? int(m.problem.total_keys) : int(shape.num_keys);
  auto* base = static_cast<unsigned char*>(workspace);
  p.counters = reinterpret_cast<unsigned int*>(base);
  p.workspace = reinterpret_cast<unsigned long long*>(base + kBuffersOffset);
  // Counters [0, 2) (unless accumulated) and [2], the work item counter, start at zero:
  // a memset node when captured, so a graph replay starts from zero too.
  const int first_cleared = options.accumulate_counters ? 2 : 0;
  rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p.counters + first_cleared), 0,
                                size_t(3 - first_cleared), stream),
            "cuMemsetD32Async (counters)");
  if (shape.rows == 0) return;
  const long blocks = (shape.rows + m.plan.rows_per_cta - 1) / m.plan.rows_per_cta;
  p.key_splits = key_splits_for(shape.rows, options.window_keys >= 0
                                                ? options.window_keys
                                                : mean_window(m.problem, shape, causal_offset));
  if (p.key_splits > 1) {
    p.partials = reinterpret_cast<unsigned long long*>(base + m.partials_offset);
    p.block_done = reinterpret_cast<unsigned int*>(base + m.block_done_offset);
    rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p.block_done), 0, size_t(blocks),
                                  stream),
              "cuMemsetD32Async (block counts)");
  }
  const unsigned grid = unsigned(std::min<long>(blocks * p.key_splits, m.max_ctas));
  CUtensorMap kmap{};
  if (m.plan.wgmma) {
    kmap = key_tensor_map(in.k, shape.num_keys, m.problem.head_dim * dtype_bytes(m.problem.k_dtype),
                          m.plan.key_tile);
  }
  void* args[] = {&p, &kmap};
  m.kernel->launch(grid, 1, unsigned(m.plan.threads), stream, args);
}

backend::Arch device_arch(const rt::Context& ctx) {
  backend::Arch a;
  a.major = ctx.info().cc_major;
  a.minor = ctx.info().cc_minor;
  // The arch-specific targets (wgmma, tcgen05) exist for 9.0 and 10.x.
  a.suffix = (a.major == 9 && a.minor == 0) || a.major == 10 ? 'a' : 0;
  return a;
}

}  // namespace winnow::ops
