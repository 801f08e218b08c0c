#include "ops/common/knn_retrieval.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/codegen/emit_knn.h"
#include "compiler/plan/knn_plan.h"
#include "ops/common/jit_module.h"
#include "ops/common/key_tensor_map.h"
#include "runtime/env.h"
#include "knn/knn_params.cuh"
#include "knn/knn_workspace.cuh"

namespace winnow::ops {

struct KnnRetrieval::Impl {
  TopkProblem problem;
  const rt::Context* ctx = nullptr;
  plan::KnnPlan plan;
  codegen::GeneratedKernel generated;
  std::shared_ptr<const rt::LoadedKernel> stream, threshold, select;
  int grid = 0;
};

namespace {

// The problem's knobs as the retrieval mode reads them (ops/topk/topk_space.h).
plan::KnnKnobs knn_knobs(const TopkProblem& p) {
  plan::KnnKnobs k;
  k.stages = p.plan_knobs.stages;
  k.capacity = p.candidate_capacity;
  k.sample_keys = std::max(p.sample_size, 0);
  k.ctas_per_sm = p.max_ctas_per_sm;
  return k;
}

}  // namespace

std::string KnnRetrieval::unsuited(const TopkProblem& p, const plan::KernelSpec& spec) {
  // The default (its [gpu][knn] cases pass, and it is several times faster than the topk
  // kernel on one-head problems); "0" keeps the
  // topk kernel. Any other value is an error, not a silent default.
  if (const auto v = rt::env_get("WINNOW_KNN_RETRIEVAL")) {
    if (*v == "0") return "the retrieval mode is off (WINNOW_KNN_RETRIEVAL=0)";
    if (*v != "1")
      throw InvalidArgument(fmt::format("WINNOW_KNN_RETRIEVAL is '{}': expected 0 or 1", *v));
  }
  std::string why = plan::knn_unsuited(spec, int(p.window));
  if (!why.empty()) return why;
  if (p.sample_size == 0) return "sample_size = 0 (no sample; the retrieval mode needs one)";
  if (p.max_workspace_bytes > 0) {
    plan::KnnPlan kp;
    std::string none;
    if (plan::choose_knn_plan(spec, kDefaultSmemLimit, &kp, &none, knn_knobs(p)) &&
        size_t(kp.workspace_bytes()) > p.max_workspace_bytes)
      return "a workspace bound below the retrieval mode's";
  }
  return "";
}

KnnRetrieval::KnnRetrieval(const TopkProblem& p, const plan::KernelSpec& spec,
                           const rt::Context* ctx)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.problem = p;
  m.ctx = ctx;
  const long smem_limit = ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit;
  std::string why;
  if (!plan::choose_knn_plan(spec, smem_limit, &m.plan, &why, knn_knobs(p)))
    throw NotSupported(why);
  m.generated = codegen::emit_knn(p.score, m.plan);
}

KnnRetrieval::~KnnRetrieval() = default;

const std::string& KnnRetrieval::source() const { return impl_->generated.source; }
std::string KnnRetrieval::plan_text() const { return plan::describe(impl_->plan); }

backend::CompileRequest KnnRetrieval::compile_request() const {
  return make_compile_request(impl_->generated, impl_->problem.arch, "winnow_knn");
}

void KnnRetrieval::build(rt::CubinCache& cache, const backend::Backend& be, std::string* key,
                         std::vector<char>* cubin) {
  Impl& m = *impl_;
  CompiledModule module = compile_cached(cache, be, compile_request(), "winnow_knn",
                                         ir::print(m.problem.score) + "\n" + plan_text(),
                                         ir::print(m.problem.score));
  *key = module.key;
  *cubin = module.cubin;
  m.stream.reset();
  if (!m.ctx) return;
  m.stream = load_entry(*m.ctx, module, codegen::kKnnStreamEntry, int(m.plan.stream_smem));
  if (!m.plan.materialize) {
    m.threshold = load_entry(*m.ctx, module, codegen::kKnnThresholdEntry, int(m.plan.select_smem));
    m.select = load_entry(*m.ctx, module, codegen::kKnnSelectEntry, int(m.plan.select_smem));
  }
  if (m.stream->max_blocks_per_sm(winnow::kKnnStreamThreads) < 1) {
    throw NotSupported(fmt::format("the retrieval kernel cannot run on this device ({} bytes "
                                   "of shared memory, {} registers per thread)",
                                   m.plan.stream_smem, m.stream->num_registers()));
  }
  // The persistent stream: one CTA per SM, or the plan's count where that many fit.
  const int per_sm = std::max(1, std::min(m.plan.ctas_per_sm,
                                          m.stream->max_blocks_per_sm(winnow::kKnnStreamThreads)));
  m.grid = m.ctx->info().sm_count * per_sm;
}

size_t KnnRetrieval::workspace_bytes() const {
  return impl_->plan.materialize ? size_t(winnow::KnnWorkspace::counters_bytes())
                                 : size_t(impl_->plan.workspace_bytes());
}

int64_t KnnRetrieval::hint_limit() const { return impl_->plan.capacity; }

int KnnRetrieval::grid() const { return impl_->grid; }

std::string KnnRetrieval::launch_info() const {
  const Impl& m = *impl_;
  if (!m.stream) return "not loaded";
  return fmt::format("retrieval mode: {} CTAs x {} threads, {} registers, {} bytes of shared "
                     "memory, {} ring stages, 64 queries a pass on wgmma, capacity {}, "
                     "{} fallback rounds",
                     m.grid, winnow::kKnnStreamThreads, m.stream->num_registers(),
                     m.plan.stream_smem, m.plan.stages, m.plan.capacity, m.plan.rounds);
}

void KnnRetrieval::execute(const TopkInputs& in, const CallShape& shape,
                           const TensorView* out_indices, const TensorView* out_scores,
                           void* workspace, CUstream stream, const CallOptions& options) const {
  const Impl& m = *impl_;
  const rt::DriverApi& cu = rt::driver();
  const winnow::KnnWorkspace layout{m.plan.capacity, m.plan.sample_cap};
  auto* base = static_cast<unsigned char*>(workspace);
  auto* counters = reinterpret_cast<unsigned*>(base);
  // Counters [0, 2) unless accumulated, and [2, 64) (unresolved rows, round counts).
  const int first_cleared = options.accumulate_counters ? 2 : 0;
  rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(counters + first_cleared), 0,
                                size_t(64 - first_cleared), stream),
            "cuMemsetD32Async (counters)");
  if (shape.rows == 0) return;
  const int eb = dtype_bytes(m.problem.k_dtype);
  CUtensorMap kmap = key_tensor_map(in.k, shape.num_keys, m.problem.head_dim * eb, winnow::kKnnKeyTile);
  const winnow::KnnSample sample =
      winnow::knn_sample(shape.num_keys, m.plan.k, m.plan.capacity, m.plan.sample_cap,
                         m.plan.sample_keys);
  const int key_tiles = int((shape.num_keys + winnow::kKnnKeyTile - 1) / winnow::kKnnKeyTile);
  const unsigned stream_grid = unsigned(std::max(1, std::min(m.grid, key_tiles)));
  for (int64_t first = 0; first < shape.rows; first += winnow::kKnnQueries) {
    winnow::KnnParams p{};
    p.queries = int(std::min<int64_t>(winnow::kKnnQueries, shape.rows - first));
    p.q = static_cast<const char*>(in.q.data) + first * in.q.strides[0] * eb;
    p.q_row_stride = in.q.strides[0];
    if (in.weights.present()) {
      p.w = static_cast<const float*>(in.weights.data) + first * in.weights.strides[0];
      p.w_row_stride = in.weights.strides[0];
    }
    if (in.key_scale.present()) p.kscale = static_cast<const float*>(in.key_scale.data);
    if (in.key_norms.present()) p.ksq = static_cast<const float*>(in.key_norms.data);
    if (out_indices && out_indices->present()) {
      p.out_indices = static_cast<int*>(out_indices->data) + first * out_indices->strides[0];
      p.out_indices_stride = out_indices->strides[0];
    }
    if (out_scores && out_scores->present()) {
      p.out_scores = static_cast<float*>(out_scores->data) + first * out_scores->strides[0];
      p.out_scores_stride = out_scores->strides[0];
    }
    p.counters = counters;
    p.num_keys = int(shape.num_keys);
    p.key_tiles = key_tiles;
    p.capacity = m.plan.capacity;
    p.key_offset = int(m.problem.shard_key_offset);
    p.sample_cap = m.plan.sample_cap;
    p.stage_bytes = int(m.plan.select_stage);
    p.negate_scores = m.problem.negate_scores ? 1 : 0;
    if (m.plan.materialize) {
      void* args[] = {&p, &kmap};
      m.stream->launch(stream_grid, 1, winnow::kKnnStreamThreads, stream, args);
      continue;
    }
    p.rows = reinterpret_cast<winnow::KnnRowState*>(base + layout.rows_offset());
    p.hist = reinterpret_cast<unsigned*>(base + layout.hist_offset());
    p.lists = reinterpret_cast<unsigned long long*>(base + layout.lists_offset());
    p.samples = reinterpret_cast<unsigned*>(base + layout.samples_offset());
    p.sample_tiles = sample.tiles;
    p.sample_stride = sample.stride;
    p.sample_valid = sample.valid;
    p.sample_rank = sample.rank;
    // Every query's state starts at zero (threshold 0, count 0); the round counts too: by
    // the threshold kernel where a sample runs (two memset launches fewer), else here.
    if (sample.tiles == 0) {
      rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p.rows), 0,
                                    size_t(winnow::kKnnQueries) * sizeof(winnow::KnnRowState) / 4,
                                    stream),
                "cuMemsetD32Async (query states)");
      if (first > 0) {
        rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(counters + winnow::kKnnRoundRows),
                                      0, size_t(64 - winnow::kKnnRoundRows), stream),
                  "cuMemsetD32Async (round counts)");
      }
    }
    void* stream_args[] = {&p, &kmap};
    void* select_args[] = {&p};
    // Each launch after the pass's first starts while the one before it ends (programmatic
    // dependent launch: the kernels wait for it in-kernel, templates/ptx/grid_dependency.cuh):
    // the launch gaps of the pass's 8 to 10 kernels overlap, and the stream's query copy
    // overlaps the threshold kernel. The first waits for whatever the stream held before.
    bool after_own = false;
    auto launch = [&](const rt::LoadedKernel& kernel, unsigned grid, unsigned threads,
                      void** args) {
      kernel.launch(grid, 1, threads, stream, args, after_own);
      after_own = true;
    };
    if (sample.tiles > 0) {
      p.sample_pass = 1;
      launch(*m.stream, unsigned(std::min(m.grid, sample.tiles)), winnow::kKnnStreamThreads,
             stream_args);
      p.sample_pass = 0;
      launch(*m.threshold, unsigned(p.queries), winnow::kKnnSelectThreads, select_args);
    }
    for (int round = 0; round <= m.plan.rounds; ++round) {
      p.round = round;
      launch(*m.stream, stream_grid, winnow::kKnnStreamThreads, stream_args);
      launch(*m.select, unsigned(p.queries), winnow::kKnnSelectThreads, select_args);
    }
  }
}

}  // namespace winnow::ops
