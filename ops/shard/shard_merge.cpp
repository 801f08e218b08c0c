#include "ops/shard/shard_merge.h"

#include <fmt/format.h>

#include "compiler/codegen/emit_shard_merge.h"
#include "ops/common/errors.h"
#include "ops/common/jit_module.h"
#include "ops/common/tensor_rules.h"
#include "ops/common/topk_op.h"
#include "runtime/nccl_library.h"
#include "knn/knn_workspace.cuh"
#include "shard/shard_merge_params.cuh"

namespace winnow::ops {
namespace {

constexpr size_t kCountersBytes = 256;
constexpr size_t kMaxWorkspace = size_t(1) << 40;

// [ranks?, rows, k] with contiguous rows: the local lists and the outputs.
void check_lists(const char* name, const TensorView& t, DType dtype, int device, int ndim,
                 int64_t ranks, int64_t rows, int64_t k) {
  TensorRules r(name, t);
  r.basics(dtype, device, ndim, ndim == 3 ? "[ranks, rows, k]" : "[rows, k]");
  if (ndim == 3) r.dim(0, ranks, "ranks");
  r.dim(ndim - 2, rows, "rows");
  r.dim(ndim - 1, k, "k");
  r.stride(ndim - 1, 1, "elements of a row must be contiguous");
  r.min_stride(ndim - 2, k, "k");
  if (ndim == 3) r.min_stride(0, rows * t.strides[1], "rows * strides[1]");
}

// An NCCL failure as a CUDA error status (the C API has no status of its own for it).
void nccl_call(const rt::NcclApi& api, int result, const char* what) {
  try {
    rt::check_nccl(api, result, what);
  } catch (const rt::NcclFailed& e) {
    throw rt::CudaError(e.what(), CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace

struct ShardMergeOp::Impl {
  ShardMergeProblem problem;
  const rt::Context* ctx = nullptr;
  codegen::GeneratedKernel generated;
  CompiledModule module;
  std::shared_ptr<const rt::LoadedKernel> pack, merge;
};

ShardMergeOp::ShardMergeOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardMergeOp::~ShardMergeOp() = default;

std::unique_ptr<ShardMergeOp> ShardMergeOp::create(const ShardMergeProblem& p,
                                                   const rt::Context* ctx) {
  if (!backend::is_supported(p.arch))
    throw NotSupported(fmt::format("arch {} is not supported: winnow supports {}", p.arch.str(),
                                   backend::supported_archs()));
  if (p.ranks < 1 || p.ranks > kMaxShardRanks)
    fail(fmt::format("ranks = {} is outside 1..{}", p.ranks, kMaxShardRanks));
  if (p.k < 1 || p.k > kMaxK) fail(fmt::format("k = {} is outside 1..{}", p.k, kMaxK));
  if (p.max_rows < 1 || p.max_rows > kMaxExtent)
    fail(fmt::format("max_rows = {} is outside 1..{}", p.max_rows, kMaxExtent));
  const double bytes = double(kCountersBytes) + double(p.max_rows) * p.k * 8.0 * (p.ranks + 1);
  if (bytes > double(kMaxWorkspace))
    fail(fmt::format("the merge workspace for max_rows = {}, k = {}, ranks = {} would be {:.0f} "
                     "bytes, above the limit of 2^40",
                     p.max_rows, p.k, p.ranks, bytes));
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->ctx = ctx;
  impl->generated = codegen::emit_shard_merge();
  return std::unique_ptr<ShardMergeOp>(new ShardMergeOp(std::move(impl)));
}

const ShardMergeProblem& ShardMergeOp::problem() const { return impl_->problem; }
const std::string& ShardMergeOp::source() const { return impl_->generated.source; }
bool ShardMergeOp::built() const { return !impl_->module.cubin.empty(); }
const std::vector<char>& ShardMergeOp::cubin() const { return impl_->module.cubin; }
size_t ShardMergeOp::counter_offset() const { return 0; }

backend::CompileRequest ShardMergeOp::compile_request() const {
  return make_compile_request(impl_->generated, impl_->problem.arch, "winnow_shard_merge");
}

void ShardMergeOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& m = *impl_;
  // One module serves every merge plan: sizes are run-time values.
  m.module = compile_cached(cache, be, compile_request(), "winnow_shard_merge", "shard merge",
                            "shard merge");
  m.pack.reset();
  m.merge.reset();
  if (!m.ctx) return;
  m.pack = load_entry(*m.ctx, m.module, codegen::kShardPackEntry, 0);
  m.merge = load_entry(*m.ctx, m.module, codegen::kShardMergeEntry,
                       int(knn_select_smem_bytes(m.problem.k)));
}

size_t ShardMergeOp::workspace_bytes() const {
  const ShardMergeProblem& p = impl_->problem;
  return kCountersBytes + size_t(p.max_rows) * size_t(p.k) * 8 * size_t(p.ranks + 1);
}

void ShardMergeOp::execute(const TensorView& local_indices, const TensorView& local_scores,
                           const AllGather* gather, const TensorView& out_indices,
                           const TensorView* out_scores, void* workspace,
                           size_t workspace_bytes, CUstream stream) const {
  const Impl& m = *impl_;
  const ShardMergeProblem& pr = m.problem;
  const int device = m.ctx ? m.ctx->info().ordinal : 0;
  const int ndim = gather ? 2 : 3;
  if (!local_indices.present()) fail("local_indices missing: the rank's top-k indices");
  if (!local_scores.present())
    fail("local_scores missing: the merge ranks by the scores the top-k wrote (out_scores)");
  if (local_indices.ndim != ndim)
    fail(fmt::format("local_indices: ndim is {}, expected {} ({})", local_indices.ndim, ndim,
                     gather ? "[rows, k]: this rank's lists, with an all-gather"
                            : "[ranks, rows, k]: every rank's lists, without an all-gather"));
  const int64_t rows = local_indices.shape[ndim - 2];
  if (rows > pr.max_rows)
    fail(fmt::format("local_indices: {} rows, the plan's max_rows is {}", rows, pr.max_rows));
  check_lists("local_indices", local_indices, DType::I32, device, ndim, pr.ranks, rows, pr.k);
  check_lists("local_scores", local_scores, DType::F32, device, ndim, pr.ranks, rows, pr.k);
  check_lists("out_indices", out_indices, DType::I32, device, 2, pr.ranks, rows, pr.k);
  if (out_scores && out_scores->present())
    check_lists("out_scores", *out_scores, DType::F32, device, 2, pr.ranks, rows, pr.k);
  if (int64_t(ndim == 3 ? pr.ranks : 1) * rows > kMaxExtent)
    fail(fmt::format("ranks x rows = {} x {} lists are more than one launch packs (2^31 - 1)",
                     pr.ranks, rows));
  const size_t need = this->workspace_bytes();
  if (workspace == nullptr) fail(fmt::format("workspace is null, but the plan needs {} bytes", need));
  if (address(workspace) % 256 != 0)
    fail(fmt::format("workspace pointer {} is not 256-byte aligned", workspace));
  if (workspace_bytes < need)
    throw WorkspaceTooSmall(fmt::format("workspace of {} bytes is smaller than the {} the plan needs",
                                        workspace_bytes, need));
  if (!m.merge) throw_not_built(built());
  m.ctx->bind();
  const rt::DriverApi& cu = rt::driver();
  auto* base = static_cast<unsigned char*>(workspace);
  ShardMergeParams p{};
  p.counters = reinterpret_cast<unsigned*>(base);
  rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p.counters), 0,
                                size_t(kShardCounterWords), stream),
            "cuMemsetD32Async (merge counters)");
  if (rows == 0) return;
  const size_t list_bytes = size_t(rows) * size_t(pr.k) * 8;
  auto* send = reinterpret_cast<u64*>(base + kCountersBytes);
  auto* gathered = reinterpret_cast<u64*>(base + kCountersBytes + list_bytes);
  p.local_indices = static_cast<const int*>(local_indices.data);
  p.local_scores = static_cast<const float*>(local_scores.data);
  p.indices_row_stride = local_indices.strides[ndim - 2];
  p.scores_row_stride = local_scores.strides[ndim - 2];
  p.indices_rank_stride = gather ? 0 : local_indices.strides[0];
  p.scores_rank_stride = gather ? 0 : local_scores.strides[0];
  p.pack_ranks = gather ? 1 : pr.ranks;
  p.packed = gather ? send : gathered;
  p.gathered = gathered;
  p.out_indices = static_cast<int*>(out_indices.data);
  p.out_indices_stride = out_indices.strides[0];
  if (out_scores && out_scores->present()) {
    p.out_scores = static_cast<float*>(out_scores->data);
    p.out_scores_stride = out_scores->strides[0];
  }
  p.rows = int(rows);
  p.k = pr.k;
  p.ranks = pr.ranks;
  p.sorted = pr.sorted ? 1 : 0;
  void* args[] = {&p};
  m.pack->launch(unsigned(p.pack_ranks * rows), 1, kShardPackThreads, stream, args);
  if (gather) (*gather)(send, gathered, list_bytes, stream);
  m.merge->launch(unsigned(rows), 1, kKnnSelectThreads, stream, args);
}

AllGather nccl_all_gather(void* comm, int ranks) {
  if (comm == nullptr) fail("comm is null: pass an ncclComm_t");
  try {
    const rt::NcclApi& api = rt::nccl();
    int count = 0;
    nccl_call(api, api.comm_count(comm, &count), "ncclCommCount");
    if (count != ranks)
      fail(fmt::format("the communicator has {} ranks, the merge plan {}", count, ranks));
    return [&api, comm](const void* send, void* recv, size_t bytes, CUstream stream) {
      nccl_call(api, api.all_gather(send, recv, bytes, rt::kNcclUint8, comm, stream),
                     "ncclAllGather");
    };
  } catch (const rt::NcclMissing& e) {
    throw NotSupported(e.what());
  }
}

}  // namespace winnow::ops
