#include "ops/paged/paged_stream.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/backend.h"
#include "compiler/codegen/emit_paged.h"
#include "ops/common/jit_module.h"
#include "ops/common/key_tensor_map.h"
#include "ops/common/tensor_rules.h"
#include "runtime/env.h"
#include "knn/knn_workspace.cuh"
#include "paged/paged_stream_params.cuh"

namespace winnow::ops {
namespace {

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

// The stream kernel's ring stages (it runs two CTAs an SM, codegen::kPagedStreamCtasPerSm):
// two stages of four pages, two a math warpgroup (winnow::kPagedWgPages: one epilogue a page
// pair, its ballot, reservation, barrier waits and shuffles serving 32 keys a warp).
constexpr int kStreamStages = 2;

// The workspace: the retrieval mode's regions per row (counters first: the op's counter
// offset is 0), then the call's plan (templates/paged/paged_stream_prepare.cuh).
struct StreamWorkspace {
  size_t counters = 0, rows = 0, hist = 0, lists = 0, samples = 0, row_visible = 0,
         row_flags = 0, req_pages = 0, req_sample = 0, page_offset = 0, bad = 0, total = 0;
  StreamWorkspace(int max_batch, int next_n, int capacity) {
    const size_t R = size_t(max_batch) * size_t(next_n), B = size_t(max_batch);
    rows = round_up(size_t(winnow::KnnWorkspace::counters_bytes()));
    hist = rows + round_up(R * sizeof(winnow::KnnRowState));
    lists = hist + round_up(R * winnow::kKnnDigits * 4);
    samples = lists + round_up(R * size_t(capacity) * 8);
    row_visible = samples + round_up(R * size_t(winnow::kPagedMaxSamplePages) * winnow::kPageKeys * 4);
    row_flags = row_visible + round_up(R * 4);
    req_pages = row_flags + round_up(R * 4);
    req_sample = req_pages + round_up(B * 4);
    page_offset = req_sample + round_up(B * 4);
    bad = page_offset + round_up(2 * (B + 1) * 4);
    total = bad + round_up(B * 4);
  }
};

}  // namespace

std::string paged_stream_unsuited(const PagedProblem& p) {
  if (p.heads != winnow::kPagedHeads)
    return fmt::format("{} heads (it scores 64 heads a row on wgmma m64n64, the engines' shape)",
                       p.heads);
  if (!(p.arch == backend::parse_arch("sm_90a")))
    return fmt::format("arch {} (it needs sm_90a: wgmma and TMA)", p.arch.str());
  const ir::Expr score = p.score ? p.score : ir::relu_mh(true);
  if (!codegen::head_sum_node(score))
    return fmt::format("the score '{}' (it needs a head-sum program: post(sum_h term(dot(h), "
                       "w[h])), as relu_mh)",
                       ir::print(score));
  return "";
}

bool paged_stream_chosen(const PagedProblem& p) {
  if (p.stream) return true;
  const auto v = rt::env_get("WINNOW_PAGED_STREAM");
  if (v && *v != "0" && *v != "1")
    throw InvalidArgument(fmt::format("WINNOW_PAGED_STREAM is '{}': expected 0 or 1", *v));
  if (v && *v == "0") return false;  // the gathered path, for measuring and comparing
  // The default wherever the path can run (exact in every suite, and faster than the
  // gathered path at every shape timed); the other problems keep the gathered
  // path.
  return paged_stream_unsuited(p).empty();
}

void validate_paged_stream_problem(const PagedProblem& p) {
  const std::string why = paged_stream_unsuited(p);
  if (!why.empty())
    throw NotSupported("the paged decode stream path (PagedProblem::stream) cannot run " + why +
                       "; leave it off for the default path");
}

winnow::PagedStreamParams paged_stream_params(const PagedProblem& p, const PagedInputs& in,
                                              int64_t B, const TensorView& out_indices,
                                              void* workspace, long select_stage,
                                              int stream_ctas) {
  const int capacity = winnow::knn_capacity(p.k);
  const StreamWorkspace ws(p.max_batch, p.next_n, capacity);
  auto* base = static_cast<unsigned char*>(workspace);
  const int64_t num_blocks = in.cache.shape[0];
  winnow::PagedStreamParams a{};
  winnow::KnnParams& k = a.knn;
  k.counters = reinterpret_cast<unsigned*>(base + ws.counters);
  k.rows = reinterpret_cast<winnow::KnnRowState*>(base + ws.rows);
  k.hist = reinterpret_cast<unsigned*>(base + ws.hist);
  k.lists = reinterpret_cast<unsigned long long*>(base + ws.lists);
  k.samples = reinterpret_cast<unsigned*>(base + ws.samples);
  k.out_indices = static_cast<int*>(out_indices.data);
  k.out_indices_stride = out_indices.strides[0];
  k.capacity = capacity;
  k.sample_cap = winnow::kPagedMaxSamplePages * winnow::kPageKeys;
  k.stage_bytes = int(select_stage);
  a.q = static_cast<const unsigned char*>(in.q.data);
  a.q_request_stride = in.q.strides[0];
  a.q_query_stride = in.q.strides[1];
  if (in.weights.present()) {
    a.w = static_cast<const float*>(in.weights.data);
    a.w_row_stride = in.weights.strides[0];
  }
  a.block_table = static_cast<const int*>(in.block_table.data);
  a.block_table_stride = in.block_table.strides[0];
  a.context_lens = static_cast<const int*>(in.context_lens.data);
  a.lens_stride = in.context_lens.strides[0];
  a.num_blocks = num_blocks;
  a.batch = int(B);
  a.next_n = p.next_n;
  a.max_keys = p.max_blocks_per_seq * winnow::kPageKeys;
  a.lens_per_query = in.context_lens.ndim == 2 ? 1 : 0;
  a.k = p.k;
  a.sorted = p.sorted ? 1 : 0;
  a.row_visible = reinterpret_cast<int*>(base + ws.row_visible);
  a.row_flags = reinterpret_cast<int*>(base + ws.row_flags);
  a.req_pages = reinterpret_cast<int*>(base + ws.req_pages);
  a.req_sample_pages = reinterpret_cast<int*>(base + ws.req_sample);
  a.page_offset = reinterpret_cast<int*>(base + ws.page_offset);
  a.stream_ctas = stream_ctas;
  a.bad = reinterpret_cast<unsigned*>(base + ws.bad);
  a.cache = static_cast<const unsigned char*>(in.cache.data);
  if (in.hint.present()) {
    a.hint = static_cast<const int*>(in.hint.data);
    a.hint_stride = in.hint.strides[0];
  }
  return a;
}

std::vector<PagedStreamStep> paged_stream_steps(const PagedProblem& p, bool hint) {
  using S = PagedStreamStep;
  const int64_t max_keys = int64_t(p.max_blocks_per_seq) * winnow::kPageKeys;
  // Every window fits in k, unsorted: each row is its window's positions (round 0's select).
  if (!p.sorted && max_keys <= p.k) return {S{S::Prepare}, S{S::Select}};
  // Every window fits the list: threshold 0 (the prepare kernel's) keeps all its keys, round
  // 0 answers every row (count <= capacity, count >= need), no sample, no fallback round.
  if (max_keys <= winnow::knn_capacity(p.k)) return {S{S::Prepare}, S{S::Stream}, S{S::Select}};
  // The first thresholds: from the sample, or from the hint's keys.
  std::vector<S> steps = hint ? std::vector<S>{S{S::Prepare}, S{S::Hint}}
                              : std::vector<S>{S{S::Prepare}, S{S::Stream, true}, S{S::Threshold}};
  for (int round = 0; round <= winnow::kKnnRadixRounds; ++round) {
    steps.push_back(S{S::Stream, false, round});
    steps.push_back(S{S::Select, false, round});
  }
  return steps;
}

size_t paged_stream_workspace_bytes(const PagedProblem& p) {
  return StreamWorkspace(p.max_batch, p.next_n, winnow::knn_capacity(p.k)).total;
}

// Whether a step list has the fallback rounds (round 1 on).
bool has_fallback_rounds(const std::vector<PagedStreamStep>& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const PagedStreamStep& s) { return s.round > 0; });
}

// The round gate's module, by NVRTC whatever the op's backend (the builtin it calls is
// NVRTC's).
CompiledModule compile_round_gate(rt::CubinCache& cache, const backend::Arch& arch) {
  static const std::unique_ptr<backend::Backend> nvrtc = backend::make_nvrtc_backend();
  return compile_cached(cache, *nvrtc,
                        make_compile_request(codegen::emit_paged_round_gate(), arch,
                                             codegen::kPagedRoundGateEntry),
                        codegen::kPagedRoundGateEntry, "paged round gate v1", "paged round gate");
}

struct PagedStream::Impl {
  PagedProblem problem;
  const rt::Context* ctx = nullptr;
  codegen::GeneratedKernel generated;
  CompiledModule module;
  std::shared_ptr<const rt::LoadedKernel> prepare, stream, threshold, hint, select;
  int capacity = 0, grid = 0;
  long stream_smem = 0, select_smem = 0, select_stage = 0;
  // paged_stream_steps(problem), without and with a hint
  std::vector<PagedStreamStep> steps, hinted_steps;
  // Under graph capture the fallback rounds go into an IF node that round_gate sets
  // (templates/paged/paged_round_gate.cuh), their launches captured on `side`; null where
  // the plan has no such rounds or the driver has no conditional nodes (then every round is
  // launched, as outside capture).
  CompiledModule gate_module;
  std::shared_ptr<const rt::LoadedKernel> round_gate;
  mutable CUstream side = nullptr;  // created at the first capture that needs it
  ~Impl() {
    if (side) rt::driver().cuStreamDestroy(side);
  }
};

PagedStream::PagedStream(const PagedProblem& p, const rt::Context* ctx)
    : impl_(std::make_unique<Impl>()) {
  validate_paged_stream_problem(p);
  Impl& m = *impl_;
  m.problem = p;
  m.ctx = ctx;
  m.capacity = winnow::knn_capacity(p.k);
  m.steps = paged_stream_steps(p);
  m.hinted_steps = paged_stream_steps(p, true);
  const ir::Expr score = p.score ? p.score : ir::relu_mh(true);
  const ir::Uses u = ir::uses(score);
  codegen::PagedStreamConfig c;
  c.next_n = p.next_n;
  c.k = p.k;
  c.stages = kStreamStages;
  c.sorted = p.sorted;
  c.uses_w = u.w;
  c.uses_kscale = u.kscale;
  m.generated = codegen::emit_paged_stream(score, c);
  m.stream_smem = winnow::PagedStreamSmem{kStreamStages, p.next_n}.bytes();
  const long smem_limit = ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit;
  m.select_stage = winnow::knn_select_stage_bytes(p.k, smem_limit);
  m.select_smem = winnow::knn_select_smem_bytes(p.k) + m.select_stage;
  const long hint_smem = winnow::PagedHintSmem::bytes();
  if (m.stream_smem > smem_limit || m.select_smem > smem_limit || hint_smem > smem_limit)
    throw NotSupported(fmt::format("the paged stream path needs {} / {} / {} bytes of shared "
                                   "memory, above the device's {}",
                                   m.stream_smem, m.select_smem, hint_smem, smem_limit));
}

PagedStream::~PagedStream() = default;

const std::string& PagedStream::source() const { return impl_->generated.source; }
backend::CompileRequest PagedStream::compile_request() const {
  return make_compile_request(impl_->generated, impl_->problem.arch, "winnow_paged_stream");
}
const std::vector<char>& PagedStream::cubin() const { return impl_->module.cubin; }
bool PagedStream::built() const { return !impl_->module.cubin.empty(); }

void PagedStream::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& m = *impl_;
  const std::string program = fmt::format(
      "{}\npaged stream v2 next_n={} k={} sorted={} stages={}",
      ir::print(m.problem.score ? m.problem.score : ir::relu_mh(true)), m.problem.next_n,
      m.problem.k, m.problem.sorted, kStreamStages);
  m.module = compile_cached(cache, be, compile_request(), "winnow_paged_stream", program,
                            "paged stream");
  if (!m.ctx) {
    // No device (a cache filled ahead of a GPU run): the round gate too, where a capture
    // on a driver with conditional nodes would build it; as there, only a speed-up, so a
    // gate that cannot be compiled here is left out.
    if (has_fallback_rounds(m.steps)) {
      try {
        compile_round_gate(cache, m.problem.arch);
      } catch (const std::exception&) {
      }
    }
    return;
  }
  m.prepare = load_entry(*m.ctx, m.module, codegen::kPagedPrepareEntry, 0);
  m.stream = load_entry(*m.ctx, m.module, codegen::kPagedStreamEntry, int(m.stream_smem));
  m.threshold = load_entry(*m.ctx, m.module, codegen::kPagedThresholdEntry, int(m.select_smem));
  m.select = load_entry(*m.ctx, m.module, codegen::kPagedSelectEntry, int(m.select_smem));
  m.hint = load_entry(*m.ctx, m.module, codegen::kPagedHintEntry,
                      int(winnow::PagedHintSmem::bytes()));
  const int per_sm = m.stream->max_blocks_per_sm(winnow::kPagedStreamThreads);
  if (per_sm < 1)
    throw NotSupported(fmt::format("the paged stream kernel cannot run on this device ({} bytes "
                                   "of shared memory, {} registers per thread)",
                                   m.stream_smem, m.stream->num_registers()));
  m.grid = m.ctx->info().sm_count * std::min(per_sm, codegen::kPagedStreamCtasPerSm);
  if (has_fallback_rounds(m.steps) && rt::driver().conditional_graphs()) {
    // Only a speed-up: where the gate cannot be built or loaded, every round is launched.
    try {
      m.gate_module = compile_round_gate(cache, m.problem.arch);
      m.round_gate = load_entry(*m.ctx, m.gate_module, codegen::kPagedRoundGateEntry, 0);
    } catch (const std::exception&) {
      m.round_gate = nullptr;
    }
  }
}

size_t PagedStream::workspace_bytes() const {
  const Impl& m = *impl_;
  if (!m.stream) throw_not_built(built());
  return paged_stream_workspace_bytes(m.problem);
}

std::string PagedStream::launch_info() const {
  const Impl& m = *impl_;
  if (!m.stream) return "not loaded";
  return fmt::format("paged stream: {} CTAs x {} threads, {} registers, {} bytes of shared "
                     "memory, {} stages of {} pages, capacity {}, {} "
                     "launches a call ({} with a hint)",
                     m.grid, winnow::kPagedStreamThreads, m.stream->num_registers(),
                     m.stream_smem, kStreamStages, 2 * winnow::kPagedWgPages, m.capacity,
                     m.steps.size(), m.hinted_steps.size());
}

void PagedStream::execute(const PagedInputs& in, int64_t B, const TensorView& out_indices,
                          void* workspace, CUstream stream) const {
  const Impl& m = *impl_;
  const PagedProblem& p = m.problem;
  if (!m.stream) throw_not_built(built());
  // The weights (the default path checks them in the top-k op's validation).
  const bool uses_w = ir::uses(p.score ? p.score : ir::relu_mh(true)).w;
  if (uses_w != in.weights.present())
    fail(uses_w ? "weights missing: the score reads w (fp32 [B * next_n, heads])"
                : "weights given, but the score reads no w");
  if (uses_w) {
    const int device = m.ctx ? m.ctx->info().ordinal : 0;
    TensorRules w("weights", in.weights);
    w.basics(DType::F32, device, 2, "[B * next_n, heads]");
    w.dim(0, B * p.next_n, "B * next_n");
    w.dim(1, p.heads, "heads");
    w.stride(1, 1, "a row's weights must be contiguous");
    w.min_stride(0, p.heads, "heads");
  }
  if (address(in.q.data) % 16 != 0 || in.q.strides[1] % 16 != 0)
    fail("q: the stream path reads 16-byte vectors: the data and the query stride must be "
         "multiples of 16 bytes");
  const int64_t num_blocks = in.cache.shape[0];
  if (num_blocks * winnow::kPagedBoxRows > int64_t(INT32_MAX))
    fail(fmt::format("cache: {} blocks is above the stream path's {} (TMA row coordinates)",
                     num_blocks, int64_t(INT32_MAX) / winnow::kPagedBoxRows));
  auto* base = static_cast<unsigned char*>(workspace);
  m.ctx->bind();
  const rt::DriverApi& cu = rt::driver();
  if (B == 0) {  // nothing to launch; the counters still read zero
    rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(base), 0, 64, stream),
              "cuMemsetD32Async (counters)");
    return;
  }
  winnow::PagedStreamParams a =
      paged_stream_params(p, in, B, out_indices, workspace, m.select_stage, m.grid);
  winnow::KnnParams& k = a.knn;
  // The cache as [num_blocks * 66, 128] bytes: block b's keys and scales are rows 66 b ..
  TensorView rows_view = contiguous_view(in.cache.data, DType::U8,
                                         {num_blocks * winnow::kPagedBoxRows, 128});
  CUtensorMap cmap = key_tensor_map(rows_view, num_blocks * winnow::kPagedBoxRows, 128,
                                    winnow::kPagedBoxRows);
  const unsigned rows = unsigned(B * p.next_n);
  void* args[] = {&a};
  void* stream_args[] = {&a, &cmap};
  bool after_own = false;
  CUstream target = stream;  // the captured body's side stream once the rounds start
  // Inside the rounds' body every launch waits for the one before it to end (no
  // programmatic edges in a conditional body: the rare rounds gain little from them).
  auto launch = [&](const rt::LoadedKernel& kernel, unsigned grid, unsigned threads, void** av) {
    kernel.launch(grid, 1, threads, target, av, after_own && target == stream);
    after_own = true;
  };
  // Under capture, with the gate loaded: rounds 1 on go into an IF node's body, set by the
  // gate after round 0's select, so that a replay with no row sent back skips them.
  bool capturing = false;
  if (m.round_gate) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    rt::check(cu.cuStreamIsCapturing(stream, &st), "cuStreamIsCapturing");
    capturing = st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  auto open_rounds = [&] {
    CUstreamCaptureStatus st;
    CUgraph graph;
    const CUgraphNode* deps = nullptr;
    size_t n = 0;
    rt::check(cu.cuStreamGetCaptureInfo(stream, &st, nullptr, &graph, &deps, nullptr, &n),
              "cuStreamGetCaptureInfo");
    CUgraphConditionalHandle handle;
    rt::check(cu.cuGraphConditionalHandleCreate(&handle, graph, m.ctx->handle(), 0,
                                                CU_GRAPH_COND_ASSIGN_DEFAULT),
              "cuGraphConditionalHandleCreate");
    void* gate_args[] = {&handle, &k.counters};
    m.round_gate->launch(1, 1, 32, stream, gate_args, false);  // after round 0 has ended
    rt::check(cu.cuStreamGetCaptureInfo(stream, &st, nullptr, &graph, &deps, nullptr, &n),
              "cuStreamGetCaptureInfo");
    CUgraphNodeParams cp{};
    cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    cp.conditional.handle = handle;
    cp.conditional.type = CU_GRAPH_COND_TYPE_IF;
    cp.conditional.size = 1;
    cp.conditional.ctx = m.ctx->handle();
    CUgraphNode node;
    rt::check(cu.cuGraphAddNode(&node, graph, deps, nullptr, n, &cp), "cuGraphAddNode");
    rt::check(cu.cuStreamUpdateCaptureDependencies(stream, &node, nullptr, 1,
                                                   CU_STREAM_SET_CAPTURE_DEPENDENCIES),
              "cuStreamUpdateCaptureDependencies");
    if (!m.side) rt::check(cu.cuStreamCreate(&m.side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    rt::check(cu.cuStreamBeginCaptureToGraph(m.side, cp.conditional.phGraph_out[0], nullptr,
                                             nullptr, 0, CU_STREAM_CAPTURE_MODE_RELAXED),
              "cuStreamBeginCaptureToGraph");
    target = m.side;
  };
  for (const PagedStreamStep& s : in.hint.present() ? m.hinted_steps : m.steps) {
    if (capturing && s.round > 0 && target == stream) open_rounds();
    k.sample_pass = s.sample ? 1 : 0;
    k.round = s.round;
    switch (s.kernel) {
      case PagedStreamStep::Prepare: launch(*m.prepare, 1, winnow::kPagedPrepareThreads, args); break;
      case PagedStreamStep::Stream:
        launch(*m.stream, unsigned(m.grid), winnow::kPagedStreamThreads, stream_args);
        break;
      case PagedStreamStep::Threshold: launch(*m.threshold, rows, winnow::kKnnSelectThreads, args); break;
      case PagedStreamStep::Hint: launch(*m.hint, rows, winnow::kPagedHintThreads, args); break;
      case PagedStreamStep::Select: launch(*m.select, rows, winnow::kKnnSelectThreads, args); break;
    }
  }
  if (target != stream) {
    CUgraph body;
    rt::check(cu.cuStreamEndCapture(m.side, &body), "cuStreamEndCapture (the rounds' body)");
  }
}

}  // namespace winnow::ops
