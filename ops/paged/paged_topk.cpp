#include "ops/paged/paged_topk.h"

#include <fmt/format.h>

#include "compiler/codegen/emit_paged.h"
#include "ops/common/jit_module.h"
#include "ops/common/tensor_rules.h"
#include "ops/paged/paged_stream.h"
#include "paged/paged_cache.cuh"
#include "paged/paged_params.cuh"

namespace winnow::ops {
namespace {

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

// After the top-k op's workspace: packed keys, scales, key offsets, page offsets, windows.
struct PagedWorkspace {
  size_t keys = 0, scales = 0, key_offset = 0, page_offset = 0, window_start = 0,
         window_end = 0, total = 0;
  PagedWorkspace(size_t topk_bytes, int64_t capacity, int max_batch, int next_n) {
    const size_t rows = size_t(max_batch) * size_t(next_n);
    keys = round_up(topk_bytes);
    scales = keys + round_up(size_t(capacity) * kPageDim);
    key_offset = scales + round_up(size_t(capacity) * 4);
    page_offset = key_offset + round_up(size_t(max_batch) * 8);
    window_start = page_offset + round_up(size_t(max_batch + 1) * 8);
    window_end = window_start + round_up(rows * 4);
    total = window_end + round_up(rows * 4);
  }
};

}  // namespace

TopkProblem paged_topk_problem(const PagedProblem& p) {
  TopkProblem t;
  t.score = p.score ? p.score : ir::relu_mh(true);
  t.expression = p.expression;
  t.heads = p.heads;
  t.head_dim = kPageDim;
  t.q_dtype = DType::E4M3;
  t.k_dtype = DType::E4M3;
  t.k = p.k;
  t.sorted = p.sorted;
  t.absolute_indices = false;  // relative to the request's first packed key: positions
  t.window = WindowKind::Ranges;
  t.arch = p.arch;
  t.key_splits = p.key_splits;
  return t;
}

struct PagedTopkOp::Impl {
  PagedProblem problem;
  const rt::Context* ctx = nullptr;
  int64_t capacity = 0;
  std::unique_ptr<TopkOp> topk;
  std::unique_ptr<PagedStream> stream;  // the stream path (then no topk, no gather)
  codegen::GeneratedKernel gather;
  CompiledModule gather_module;
  std::shared_ptr<const rt::LoadedKernel> windows_kernel, gather_kernel;
};

PagedTopkOp::PagedTopkOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PagedTopkOp::~PagedTopkOp() = default;

std::unique_ptr<PagedTopkOp> PagedTopkOp::create(const PagedProblem& p, const rt::Context* ctx) {
  validate_paged_problem(p);
  auto m = std::make_unique<Impl>();
  m->problem = p;
  m->ctx = ctx;
  m->capacity = p.max_total_keys > 0
                    ? p.max_total_keys
                    : int64_t(p.max_batch) * p.max_blocks_per_seq * kPageKeys;
  if (paged_stream_chosen(p)) {
    m->problem.stream = true;
    m->capacity = 0;  // no packed buffer
    m->stream = std::make_unique<PagedStream>(m->problem, ctx);
    return std::unique_ptr<PagedTopkOp>(new PagedTopkOp(std::move(m)));
  }
  m->topk = TopkOp::create(paged_topk_problem(p), ctx);
  m->gather = codegen::emit_paged_gather();
  return std::unique_ptr<PagedTopkOp>(new PagedTopkOp(std::move(m)));
}

const PagedProblem& PagedTopkOp::problem() const { return impl_->problem; }
bool PagedTopkOp::stream() const { return impl_->stream != nullptr; }
const std::string& PagedTopkOp::stream_source() const {
  static const std::string none;
  return impl_->stream ? impl_->stream->source() : none;
}
const std::vector<char>& PagedTopkOp::stream_cubin() const {
  static const std::vector<char> none;
  return impl_->stream ? impl_->stream->cubin() : none;
}
std::string PagedTopkOp::launch_info() const {
  return impl_->stream ? impl_->stream->launch_info() : impl_->topk->launch_info();
}
const TopkOp& PagedTopkOp::topk() const {
  if (!impl_->topk) throw NotSupported("the paged stream path runs no fused top-k op");
  return *impl_->topk;
}
const std::string& PagedTopkOp::gather_source() const { return impl_->gather.source; }
const std::vector<char>& PagedTopkOp::gather_cubin() const { return impl_->gather_module.cubin; }
int64_t PagedTopkOp::capacity() const { return impl_->capacity; }
bool PagedTopkOp::built() const {
  if (impl_->stream) return impl_->stream->built();
  return impl_->topk->built() && !gather_cubin().empty();
}
size_t PagedTopkOp::counter_offset() const {
  return impl_->stream ? 0 : impl_->topk->counter_offset();  // the stream's: its first words
}

void PagedTopkOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& m = *impl_;
  if (m.stream) {
    m.stream->build(cache, be);
    return;
  }
  m.topk->build(cache, be);
  m.gather_module = compile_cached(cache, be,
                                   make_compile_request(m.gather, m.problem.arch, "winnow_paged"),
                                   "winnow_paged", "paged gather v1", "paged gather");
  if (!m.ctx) return;
  m.windows_kernel = load_entry(*m.ctx, m.gather_module, codegen::kPagedWindowsEntry, 0);
  m.gather_kernel = load_entry(*m.ctx, m.gather_module, codegen::kPagedGatherEntry, 0);
}

size_t PagedTopkOp::workspace_bytes() const {
  const Impl& m = *impl_;
  if (m.stream) return m.stream->workspace_bytes();
  return PagedWorkspace(m.topk->workspace_bytes(), m.capacity, m.problem.max_batch,
                        m.problem.next_n)
      .total;
}

void PagedTopkOp::execute(const PagedInputs& in, const TensorView& out_indices, void* workspace,
                          size_t workspace_bytes, CUstream stream) const {
  const Impl& m = *impl_;
  const PagedProblem& p = m.problem;
  const int device = m.ctx ? m.ctx->info().ordinal : 0;
  const int64_t B = validate_paged_call(p, device, in, &out_indices);
  if (!m.stream && !m.gather_kernel) throw_not_built(built());
  const size_t need = this->workspace_bytes();  // either path's (NotBuilt before build)
  if (workspace == nullptr || address(workspace) % 256 != 0)
    fail("workspace: null or not 256-byte aligned");
  if (workspace_bytes < need)
    throw WorkspaceTooSmall(fmt::format("workspace of {} bytes is smaller than the {} the plan "
                                        "needs",
                                        workspace_bytes, need));
  if (m.stream) {
    m.stream->execute(in, B, out_indices, workspace, stream);
    return;
  }
  const size_t topk_bytes = m.topk->workspace_bytes();
  const PagedWorkspace ws(topk_bytes, m.capacity, p.max_batch, p.next_n);
  auto* base = static_cast<unsigned char*>(workspace);
  const int64_t rows = B * p.next_n;

  // The top-k op's views over the packed keys (checked again by its validation).
  TopkInputs t;
  t.q = in.q;
  t.q.ndim = 3;
  t.q.shape[0] = rows;
  t.q.shape[1] = p.heads;
  t.q.shape[2] = kPageDim;
  t.q.strides[0] = in.q.strides[1];
  t.q.strides[1] = in.q.strides[2];
  t.q.strides[2] = 1;
  t.q.shape[3] = t.q.strides[3] = 0;
  t.k = contiguous_view(base + ws.keys, DType::E4M3, {m.capacity, kPageDim});
  t.key_scale = contiguous_view(base + ws.scales, DType::F32, {m.capacity});
  t.weights = in.weights;
  t.window_start = contiguous_view(base + ws.window_start, DType::I32, {rows});
  t.window_end = contiguous_view(base + ws.window_end, DType::I32, {rows});
  for (TensorView* v : {&t.k, &t.key_scale, &t.window_start, &t.window_end}) v->device = device;

  PagedParams a{};
  a.cache = static_cast<const unsigned char*>(in.cache.data);
  a.block_table = static_cast<const int*>(in.block_table.data);
  a.context_lens = static_cast<const int*>(in.context_lens.data);
  a.num_blocks = in.cache.shape[0];
  a.block_table_stride = in.block_table.strides[0];
  a.lens_stride = in.context_lens.strides[0];
  a.capacity = m.capacity;
  a.keys = base + ws.keys;
  a.scales = reinterpret_cast<float*>(base + ws.scales);
  a.key_offset = reinterpret_cast<long long*>(base + ws.key_offset);
  a.page_offset = reinterpret_cast<long long*>(base + ws.page_offset);
  a.window_start = reinterpret_cast<int*>(base + ws.window_start);
  a.window_end = reinterpret_cast<int*>(base + ws.window_end);
  a.batch = int(B);
  a.next_n = p.next_n;
  a.max_keys = p.max_blocks_per_seq * kPageKeys;
  a.lens_per_query = in.context_lens.ndim == 2 ? 1 : 0;
  m.ctx->bind();
  void* args[] = {&a};
  if (B > 0) {
    m.windows_kernel->launch(1, 1, kPagedScanThreads, stream, args);
    // A fixed grid (four CTAs per SM) strides over however many pages the lengths touch.
    const unsigned grid = unsigned(4 * m.ctx->info().sm_count);
    m.gather_kernel->launch(grid, 1, kPagedGatherThreads, stream, args);
  }
  CallOptions options;
  options.window_keys = a.max_keys;
  m.topk->execute(t, &out_indices, nullptr, workspace, topk_bytes, stream, options);
}

}  // namespace winnow::ops
