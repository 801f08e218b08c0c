// winnow bench <workload> --shards N: tools/bench_shards.h.
#include "tools/bench_shards.h"

#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "compiler/backend/backend.h"
#include "compiler/build_id.h"
#include "compiler/ir/ir.h"
#include "ops/common/names.h"
#include "ops/shard/shard_merge.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/nccl_library.h"
#include "tools/bench_common.h"
#include "tools/random_inputs.h"

namespace winnow::tools {
namespace {

using ops::DType;

// One size and k: rows, keys, the window, the inputs the score reads.
struct ShardShape {
  int64_t Q = 0, T = 0;
  int k = 0;
  bool causal = false;  // dsa: the chunk is the last Q positions of T
  bool weights = false, kscale = false;
};

ops::TopkProblem sized_problem(const ShardBenchArgs& a, const rt::Context& ctx, const ShardShape& s) {
  ops::TopkProblem p = workload_problem(*a.workload, a.dtype, a.head_dim, ops::device_arch(ctx));
  p.k = s.k;
  if (s.causal) {
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = 1;
    p.causal_offset = s.T - s.Q;
  }
  return p;
}

// The inputs of one GPU: q, weights (all rows), keys and key scales (its shard, or all).
struct Inputs {
  rt::DeviceBuffer q, k, w, kscale;
  ops::TopkInputs view(const ops::TopkProblem& p, const ShardShape& s, int64_t keys) const {
    ops::TopkInputs in;
    in.q = ops::contiguous_view(q.data(), p.q_dtype, {s.Q, p.heads, p.head_dim});
    in.k = ops::contiguous_view(k.data(), p.k_dtype, {keys, p.head_dim});
    if (s.weights) in.weights = ops::contiguous_view(w.data(), DType::F32, {s.Q, p.heads});
    if (s.kscale) in.key_scale = ops::contiguous_view(kscale.data(), DType::F32, {keys});
    return in;
  }
};

// A copy of `bytes` from `src` (on `from`'s device) into a new buffer on `to`'s device.
rt::DeviceBuffer peer_copy(const rt::Context& to, const rt::Context& from, CUdeviceptr src, size_t bytes) {
  to.bind();
  rt::DeviceBuffer b(std::max<size_t>(bytes, 16));
  if (bytes > 0)
    rt::check(rt::driver().cuMemcpyPeer(b.ptr(), to.handle(), src, from.handle(), bytes), "cuMemcpyPeer");
  return b;
}

// One GPU of the sharded run: its shard [offset, offset + keys), its plans and buffers.
struct Rank {
  std::unique_ptr<rt::Context> ctx;  // first: the buffers below are freed under it
  int64_t offset = 0, keys = 0;
  Inputs in;
  std::unique_ptr<ops::TopkOp> op;
  std::unique_ptr<ops::ShardMergeOp> merge;
  rt::DeviceBuffer idx, scores, out, ws, merge_ws;
  CUstream stream = nullptr;
  void* comm = nullptr;
  ops::AllGather gather;  // over comm
  ~Rank() {
    if (!ctx) return;
    ctx->bind();
    if (stream) rt::driver().cuStreamDestroy(stream);
  }
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Times {
  double median = 0, min = 0, max = 0;
};
Times summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

std::string params_json(const ShardBenchArgs& a, const ShardShape& s, int shards, const ops::TopkProblem& p) {
  const char* t = ops::dtype_short_name(a.dtype);
  if (a.workload->family == Family::Knn)
    return fmt::format("{{\"N\": {}, \"d\": {}, \"k\": {}, \"batch\": {}, \"dtype\": \"{}\", \"shards\": {}}}",
                       s.T, p.head_dim, s.k, s.Q, t, shards);
  return fmt::format("{{\"Q\": {}, \"T\": {}, \"H\": {}, \"d\": {}, \"k\": {}, \"q_dtype\": \"{}\", "
                     "\"k_dtype\": \"{}\", \"shards\": {}}}",
                     s.Q, s.T, p.heads, p.head_dim, s.k, t, t, shards);
}

// Every rank's thread runs `call` (its sharded top-k and merge, stream synchronised) at
// the same moment, warmup + repeats times; the wall time of each timed round (from the
// common start to the last rank's end) in ms. An error on any rank ends the process: the
// others would wait in the collective for ever.
std::vector<double> time_ranks(std::vector<Rank>& ranks, int warmup, int repeats,
                               const std::function<void(Rank&)>& call) {
  const int R = int(ranks.size());
  std::barrier<> sync(R);
  std::vector<double> times;
  std::chrono::steady_clock::time_point t0;
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    threads.emplace_back([&, r] {
      try {
        ranks[r].ctx->bind();
        for (int i = 0; i < warmup + repeats; ++i) {
          sync.arrive_and_wait();
          if (r == 0) t0 = std::chrono::steady_clock::now();
          sync.arrive_and_wait();
          call(ranks[r]);
          sync.arrive_and_wait();
          if (r == 0 && i >= warmup) times.push_back(ms_since(t0));
        }
      } catch (const std::exception& e) {
        fmt::print(stderr, "winnow bench: --shards, GPU {}: {}\n", r, e.what());
        std::_Exit(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return times;
}

// The one-GPU run timed the same way (wall time of a call with its stream synchronised).
std::vector<double> time_one(const rt::Context& ctx, int warmup, int repeats, const std::function<void()>& call) {
  ctx.bind();
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    if (i >= warmup) times.push_back(ms_since(t0));
  }
  return times;
}

int run_one(const ShardBenchArgs& a, std::vector<Rank>& ranks, int64_t size, int k,
            rt::CubinCache& cache, const backend::Backend& be, const std::string& gpu) {
  const int R = a.shards;
  const rt::DriverApi& cu = rt::driver();
  const RowsKeys rk = workload_rows_keys(*a.workload, size, a.queries);
  ShardShape s;
  s.Q = rk.rows, s.T = rk.keys, s.k = k;
  s.causal = a.workload->causal_ratio != 0;
  rt::Context& ctx0 = *ranks[0].ctx;
  ctx0.bind();
  const ops::TopkProblem p = sized_problem(a, ctx0, s);
  const ir::Uses u = ir::uses(p.score);
  s.weights = u.w, s.kscale = u.kscale;
  const std::string label = fmt::format("{} T={} k={} x{}", a.workload->name, s.T, k, R);

  // The whole inputs on GPU 0 (the one-GPU run's), then each shard copied to its GPU.
  auto t0 = std::chrono::steady_clock::now();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs all;
  all.q = random_device_tensor(p.q_dtype, size_t(s.Q) * p.heads * p.head_dim, normal, 4 * a.seed);
  all.k = random_device_tensor(p.k_dtype, size_t(s.T) * p.head_dim, normal, 4 * a.seed + 1);
  if (s.weights)
    all.w = random_device_tensor(DType::F32, size_t(s.Q) * p.heads,
                                 std::uniform_real_distribution<float>(-1.0f, 1.0f), 4 * a.seed + 2);
  if (s.kscale)
    all.kscale = random_device_tensor(DType::F32, size_t(s.T),
                                      std::uniform_real_distribution<float>(0.5f, 2.0f), 4 * a.seed + 3);
  const size_t key_bytes = size_t(p.head_dim) * size_t(ops::dtype_bytes(p.k_dtype));
  for (int r = 0; r < R; ++r) {
    Rank& g = ranks[r];
    g.offset = s.T * r / R;
    g.keys = s.T * (r + 1) / R - g.offset;
    g.in.q = peer_copy(*g.ctx, ctx0, all.q.ptr(), all.q.size());
    g.in.k = peer_copy(*g.ctx, ctx0, all.k.ptr() + size_t(g.offset) * key_bytes, size_t(g.keys) * key_bytes);
    if (s.weights) g.in.w = peer_copy(*g.ctx, ctx0, all.w.ptr(), all.w.size());
    if (s.kscale) g.in.kscale = peer_copy(*g.ctx, ctx0, all.kscale.ptr() + size_t(g.offset) * 4, size_t(g.keys) * 4);
  }
  fmt::print(stderr, "{}: inputs generated and split in {:.1f} s\n", label, seconds_since(t0));

  // One GPU over every key.
  t0 = std::chrono::steady_clock::now();
  ctx0.bind();
  auto one = ops::TopkOp::create(p, &ctx0);
  one->build(cache, be);
  rt::DeviceBuffer one_idx(size_t(s.Q) * k * 4), one_ws(std::max<size_t>(one->workspace_bytes(), 256));
  const ops::TensorView one_out = ops::contiguous_view(one_idx.data(), DType::I32, {s.Q, int64_t(k)});
  const ops::TopkInputs one_in = all.view(p, s, s.T);
  const Times one_t = summarise(time_one(ctx0, a.warmup, a.repeats, [&] {
    one->execute(one_in, &one_out, nullptr, one_ws.data(), one_ws.size(), nullptr);
    rt::check(cu.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  }));
  std::vector<int> want(size_t(s.Q) * k);
  one_idx.download(want.data(), want.size() * 4);
  fmt::print(stderr, "{}: one GPU {:.3f} ms median ({:.1f} s with its build)\n", label, one_t.median,
             seconds_since(t0));

  // The shards: each GPU's plan (its offset, the total), its merge plan, its buffers.
  t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < R; ++r) {
    Rank& g = ranks[r];
    g.ctx->bind();
    ops::TopkProblem pr = sized_problem(a, *g.ctx, s);
    pr.shard_key_offset = g.offset;
    pr.total_keys = s.T;
    g.op = ops::TopkOp::create(pr, g.ctx.get());
    g.op->build(cache, be);
    ops::ShardMergeProblem mp;
    mp.ranks = R;
    mp.k = k;
    mp.max_rows = s.Q;
    mp.sorted = pr.sorted;
    mp.arch = pr.arch;
    g.merge = ops::ShardMergeOp::create(mp, g.ctx.get());
    g.merge->build(cache, be);
    g.idx = rt::DeviceBuffer(size_t(s.Q) * k * 4);
    g.scores = rt::DeviceBuffer(size_t(s.Q) * k * 4);
    g.out = rt::DeviceBuffer(size_t(s.Q) * k * 4);
    g.ws = rt::DeviceBuffer(std::max<size_t>(g.op->workspace_bytes(), 256));
    g.merge_ws = rt::DeviceBuffer(std::max<size_t>(g.merge->workspace_bytes(), 256));
  }
  fmt::print(stderr, "{}: {} shard plans built in {:.1f} s\n", label, R, seconds_since(t0));
  const Times shard_t = summarise(time_ranks(ranks, a.warmup, a.repeats, [&](Rank& g) {
    const ops::TopkInputs in = g.in.view(g.op->problem(), s, g.keys);
    const ops::TensorView idx = ops::contiguous_view(g.idx.data(), DType::I32, {s.Q, int64_t(k)});
    const ops::TensorView sc = ops::contiguous_view(g.scores.data(), DType::F32, {s.Q, int64_t(k)});
    const ops::TensorView out = ops::contiguous_view(g.out.data(), DType::I32, {s.Q, int64_t(k)});
    g.op->execute(in, &idx, &sc, g.ws.data(), g.ws.size(), g.stream);
    g.merge->execute(idx, sc, &g.gather, out, nullptr, g.merge_ws.data(), g.merge_ws.size(), g.stream);
    rt::check(rt::driver().cuStreamSynchronize(g.stream), "cuStreamSynchronize");
  }));

  // Every GPU's merged result against the one-GPU result, every row.
  int64_t rows_differing = 0;
  for (int r = 0; r < R; ++r) {
    ranks[r].ctx->bind();
    std::vector<int> got(want.size());
    ranks[r].out.download(got.data(), got.size() * 4);
    for (int64_t row = 0; row < s.Q; ++row)
      rows_differing += !std::equal(got.begin() + row * k, got.begin() + (row + 1) * k, want.begin() + row * k);
  }
  const bool exact = rows_differing == 0;
  const double speedup = one_t.median / shard_t.median;
  fmt::print(stderr, "{}: {} GPUs {:.3f} ms median, one GPU {:.3f} ms: {:.2f}x; {} of {} rows differ "
             "(over all {} GPUs' results)\n",
             label, R, shard_t.median, one_t.median, speedup, rows_differing, s.Q * R, R);

  const std::string params = params_json(a, s, R, p);
  auto rec = [&](const char* impl, const Times& t, const std::string& extra) {
    return fmt::format(
        "{{\"workload\": \"{}\", \"impl\": \"{}\", \"params\": {}, \"ms_median\": {:.4f}, "
        "\"ms_min\": {:.4f}, \"ms_max\": {:.4f}, \"timing\": \"host wall time, stream synchronised\"{}, "
        "\"repeats\": {}, \"warmup\": {}, \"gpu\": {}, \"commit\": \"{}\", \"date\": \"{}\"}}",
        a.workload->name, impl, params, t.median, t.min, t.max, extra, a.repeats, a.warmup,
        json_string(gpu), winnow::build_id(), utc_date());
  };
  emit(a.out_path, {rec("winnow-one-gpu", one_t, ""),
                    rec("winnow-shards", shard_t,
                        fmt::format(", \"ratio_to_one_gpu\": {:.4f}, \"speedup\": {:.4f}, \"exact\": {}, "
                                    "\"rows_differing\": {}",
                                    shard_t.median / one_t.median, speedup, exact ? "true" : "false",
                                    rows_differing))});
  for (Rank& g : ranks) {  // the next size's plans and buffers replace these
    g.ctx->bind();
    g.op.reset();
    g.merge.reset();
    g.in = Inputs{};
    for (rt::DeviceBuffer* b : {&g.idx, &g.scores, &g.out, &g.ws, &g.merge_ws}) *b = rt::DeviceBuffer{};
  }
  ctx0.bind();
  return exact ? 0 : 1;
}

}  // namespace

int run_bench_shards(const ShardBenchArgs& a) {
  int count = 0;
  if (rt::gpu_available()) rt::check(rt::driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < a.shards) {
    fmt::print(stderr, "winnow bench: --shards {} needs {} GPUs, found {}\n", a.shards, a.shards, count);
    return 1;
  }
  const rt::NcclApi* nccl = nullptr;
  try {
    nccl = &rt::nccl();
  } catch (const rt::NcclMissing& e) {
    fmt::print(stderr, "winnow bench: --shards: {}\n", e.what());
    return 1;
  }
  std::vector<Rank> ranks(size_t(a.shards));
  std::vector<int> devices(size_t(a.shards));
  std::vector<void*> comms(size_t(a.shards), nullptr);
  for (int r = 0; r < a.shards; ++r) {
    devices[size_t(r)] = r;
    ranks[size_t(r)].ctx = std::make_unique<rt::Context>(r);
    ranks[size_t(r)].ctx->bind();
    rt::check(rt::driver().cuStreamCreate(&ranks[size_t(r)].stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  rt::check_nccl(*nccl, nccl->comm_init_all(comms.data(), a.shards, devices.data()), "ncclCommInitAll");
  for (int r = 0; r < a.shards; ++r) {
    ranks[size_t(r)].comm = comms[size_t(r)];
    ranks[size_t(r)].gather = ops::nccl_all_gather(comms[size_t(r)], a.shards);
  }
  const std::string gpu = ranks[0].ctx->info().name;
  fmt::print(stderr, "winnow bench {} --shards {} on {} x {} (NCCL {}), sizes [{}], k [{}]\n",
             a.workload->name, a.shards, a.shards, gpu, nccl->path, fmt::join(a.sizes, ", "),
             fmt::join(a.ks, ", "));
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  int status = 0;
  for (int64_t size : a.sizes)
    for (int64_t k : a.ks) status |= run_one(a, ranks, size, int(k), cache, *be, gpu);
  for (void* c : comms) nccl->comm_destroy(c);
  if (status) fmt::print(stderr, "\nNOT EXACT: a merged result differs from the one-GPU result\n");
  return status;
}

}  // namespace winnow::tools
