// `winnow bench`: the docs/performance.md workloads, timed on the GPU, one JSON record per
// (workload, size, impl) on stdout (and appended to --out), a human table on stderr.
//
// Impls: "winnow" (the fused score + exact top-k), "materialize" (winnow's score-only
// kernel writing the fp32 [rows, keys] matrix: the logits-only baseline, no top-k on it)
// and "floor" (the FLOP or byte floor at the measured or published ceilings); plus
// "winnow-tuned" where the tuning database (`winnow tune`) holds a plan for the size.
//
// The score matrix at T = 1M is 32 GiB: it lives on the device only. The exactness check
// downloads --check-rows rows of it (spread over the queries, first and last included)
// and compares them with the fused index sets; every fused row is checked for form
// (in range, distinct, no padding when the window holds k keys). One materialize run per
// size serves the fused runs of every k of that size.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "compiler/backend/backend.h"
#include "testing/fast_fill.h"
#include "testing/host_data.h"
#include "testing/reference.h"
#include "ops/shard/shard_merge.h"
#include "ops/common/backend_choice.h"
#include "ops/topk/stream_topk.h"
#include "compiler/build_id.h"
#include "ops/common/topk_op.h"
#include "ops/topk/topk_tuning.h"
#include "runtime/cuda_driver.h"
#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuning_db.h"
#include "tools/anchor_ratios.h"
#include "tools/anchor_records.h"
#include "tools/bench_common.h"
#include "tools/bench_shards.h"
#include "tools/commands.h"
#include "tools/random_inputs.h"
#include "tools/workloads.h"

namespace winnow::tools {
namespace {

using ops::parallel_for;

// ---------------------------------------------------------------------------------------
// Workloads and arguments

using ops::DType;

// csa-1m: up to this S every row is checked against the materialized matrix; above it,
// --check-rows random rows (1000 by default) against the CPU reference.
constexpr int64_t kCsaMaterializeMax = 65536;
constexpr int64_t kCsaReferenceRows = 1000;


// Every workload `bench` runs, dsa-decode (tools/cmd_bench_decode.cpp) and block-select
// (tools/cmd_bench_block.cpp) included.
std::string workload_list() {
  std::string s;
  for (const Workload& w : workloads()) s += (s.empty() ? "" : ", ") + std::string(w.name);
  return s + ", dsa-decode, block-select and jit";
}

struct BenchArgs {
  const Workload* workload = nullptr;
  // Empty or 0 until parsed: then the workload's defaults.
  std::vector<int64_t> sizes, ks;
  int64_t queries = 0;
  int head_dim = 0;
  std::optional<DType> dtype;
  std::optional<int> check_rows;
  int64_t chunk_rows = 0;  // csa: rows per launch of the streaming driver (0: chosen)
  bool hint = true;        // csa: the previous chunk's selection as the sample hint
  bool tuned = true;       // also time the tuning database's plan ("winnow-tuned")
  std::string point;       // --point: these knobs instead of the tuning database's plan
  int repeats = 10, warmup = 2;
  uint64_t seed = 1;
  int shards = 1;  // --shards N: keys split over N GPUs (knn-ip, dsa-prefill)
  bool sharded = false;  // --shards given (1 too: the sharded path on one GPU)
  bool compile_only = false;  // --compile-only: the run's kernels into the cache, no GPU
  bool key_norms = false;  // --key-norms: knn-l2 / knn-cosine read |k|^2 as an input
  std::string ceilings_path, baselines_path, out_path;
  std::string anchors_path;  // --anchors: the engines' records (tools/anchor_records.h)
  const Workload& w() const { return *workload; }
};

// The short name (ops/common/names.h): what --q-dtype takes and bench records say.
const char* dtype_flag(DType t) { return ops::dtype_short_name(t); }

constexpr const char* kHelp = R"(winnow bench <workload> [options]

Times the fused score + exact top-k ("winnow") against the score-only kernel writing the
fp32 score matrix ("materialize", no top-k on it) and the FLOP or byte floor ("floor"), on
random inputs. One JSON record per (workload, size, k, impl) on stdout; a summary table on
stderr.

Workloads:
  dsa-prefill          relu_mh with per-key scale, H=64, d=128, every query sees all T keys
  dsa-prefill-causal   as dsa-prefill, query i sees keys [0, T - Q + i + 1) (needs T >= Q)
  dsa-glm              as dsa-prefill with H=32
  csa-1m               relu_mh, H=64, d=128, bf16 (fp8: with per-key scale), compressed
                       causal m=4: S query positions, T = S/4 keys, position p sees keys
                       t < (p + 1) / 4; run by the streaming driver (chunks of rows, each
                       chunk's sample hint the previous chunk's last selection)
  knn-ip               inner product, d=768, fp16 corpus of N vectors, a batch of queries
  knn-l2               as knn-ip with the negated squared L2 distance
  knn-cosine           as knn-ip with the cosine similarity
  dsa-decode           the paged decode indexer top-k over the engines' fp8 key cache,
                       B requests x len, mixed batches, graph replay (its own options:
                       winnow bench dsa-decode --help)
  block-select         FlashPrefill block selection + block-sparse attention (its own
                       options: winnow bench block-select --help)
  jit                  the cold build of a new kernel and its disk hit, per backend; no
                       GPU needed (its own options: winnow bench jit --help)

Options:
  --T LIST            sizes, comma-separated (K and M suffixes: 64K = 65536): the keys T
                      (dsa) [65536,262144,1048576], the sequence length S (csa)
                      [32K,64K,128K,256K,512K,1M] or the corpus size N (knn) [1048576]
  --Q N               queries (dsa) [8192] or batch (knn) [64]; csa runs every position
  --k LIST            keys selected per query, comma-separated; one kernel per k
                      [dsa 2048, csa 512,1024, knn 128,1024,4096,8192]
  --q-dtype TYPE      q and k type: fp8 (e4m3; relu_mh with per-key scale) or bf16; knn
                      also fp16 and fp32 [dsa fp8, csa bf16, knn fp16] (--dtype: the same)
  --d N               head dimension [dsa, csa 128, knn 768]
  --repeats N         timed runs, median/min/max reported [10]
  --warmup N          untimed runs before them [2]
  --check-rows N      materialized rows downloaded and compared with the fused result
                      [64; knn: every row when the matrix is at most 2 GiB; csa: every
                      row for S <= 64K, else N random rows recomputed on the CPU [1000]]
  --chunk-rows N      csa: rows per launch of the streaming driver [0: 64 waves of CTAs]
  --no-hint           csa: no sample hint from the previous chunk
  --compile-only      build the kernels the run would time (the materialize baseline and
                      the fused plan of every size and k, sm_90a, by $WINNOW_BACKEND) into
                      the kernel cache and stop; no GPU needed. A cache filled so with the
                      llvm backend serves a GPU machine without LLVM (WINNOW_BACKEND=llvm
                      winnow bench ... --no-tuned there, WINNOW_CACHE_DIR the same folder)
  --point KNOBS       time the plan with these knobs (a tuning point's text, e.g.
                      "sample_size=1024 bins=1024"; knobs not named keep the heuristic
                      plan's) as the "winnow-tuned" record beside "winnow", in place of
                      the tuning database's plan; dsa and knn workloads, one GPU. A
                      plan that materializes with another kernel (another row block,
                      key tile or form) is checked against its own materialize
  --no-tuned          no "winnow-tuned" record: by default, where the tuning database
                      (winnow tune) has a plan for the size that differs from the
                      heuristic one, it is timed and checked beside "winnow" (its
                      "ratio_to_winnow" is tuned / heuristic)
  --seed N            random inputs seed [1]
  --ceilings FILE     JSON from bench/ceilings.py (copy_tbps, bf16_tflops, fp8_tflops);
                      the card's published values (H100; H200 and others)
                      when absent (docs/performance.md)
  --baselines FILE    JSON from bench/torch_baselines.py, measured in the same run:
                      adds "materialize+torch.topk" (dsa, csa: this run's materialize
                      time plus torch.topk over the same logits) or "torch" (knn: matmul
                      + topk) records and the winnow record's ratio to them
  --anchors FILE      the engines' pipeline timed on the same GPU in the same run
                      (../shared/anchors/run.sh: DeepGEMM's fp8_mqa_logits or paged
                      logits, FlashInfer's top-k, their sums, + torch.topk), one JSON
                      record per line. Each record whose workload and params (Q, T, H, d,
                      k; knn-ip: B, N, d, k, dtype) equal a winnow row's is printed in a
                      table after the bench's own, with winnow's time and the ratio
                      winnow ms / anchor ms (below 1: winnow is faster), and added to
                      the winnow record as "anchors": {IMPL: {"ms": .., "ratio": ..}}
                      ({"error": ..} for a record with one, such as OOM). Rows with no
                      record say "no record"; "note" lines and records with "error" are
                      reported as skipped. A file that cannot be read, a malformed line
                      (named FILE:LINE) or a file without timed records stops the run
                      (exit 1) before anything is built. With --compile-only the file is
                      read and matched to the run's sizes, no time is taken and no
                      ratio printed. dsa-decode takes it too. Example:
                        bash ../shared/anchors/run.sh .anchors > anchors.jsonl
                        winnow bench dsa-prefill --T 64K,1M --anchors anchors.jsonl
  --out FILE          append the JSON records to FILE too
  --key-norms         knn-l2 and knn-cosine: the keys' |k|^2 passed as the key_norms
                      input (computed once before the runs, as a vector database stores
                      them) instead of summed by the kernel; the floor then reads 4 bytes
                      a key more
  --shards N          knn-ip and dsa-prefill: the keys split over N GPUs of this machine,
                      each GPU's top-k merged exactly through NCCL (one communicator per
                      GPU, one thread each; NCCL from WINNOW_NCCL_LIBRARY or
                      libnccl.so.2), against one GPU over all the keys in the same run,
                      both timed as host wall time with the stream synchronised; every
                      GPU's merged rows checked against the one-GPU rows. Needs N
                      GPUs (exit 1 otherwise); records "winnow-one-gpu" and
                      "winnow-shards" (params "shards", "speedup", "exact"). --shards 1
                      runs that path on one GPU (a merge of one list, NCCL of one rank)
)";

const Workload& find_workload(const std::string& name) {
  for (const Workload& w : workloads())
    if (name == w.name) return w;
  if (name == "block-select" || name == "jit" || name == "dsa-decode")  // dispatched by
    // bench_main only as the first argument
    throw UsageError(name + " has its own options: name it first, as in 'winnow bench " + name +
                     (name == "jit"          ? " --kernels relu_mh"
                      : name == "dsa-decode" ? " --B 64 --len 64K"
                                             : " --L 16K") +
                     "' (see winnow bench " + name + " --help)");
  throw UsageError("unknown workload '" + name + "'; the workloads are " + workload_list());
}

// The workload's defaults for what was not given, then the checks that need them.
void resolve(BenchArgs& a) {
  const Workload& w = a.w();
  if (a.sizes.empty()) a.sizes = w.sizes;
  if (a.ks.empty()) a.ks = w.ks;
  if (!a.dtype) a.dtype = w.dtype;
  if (a.head_dim == 0) a.head_dim = w.head_dim;
  if (w.family == Family::Csa && a.queries != 0)
    throw UsageError("csa-1m runs every position of the sequence: give S with --T, not --Q");
  if (a.queries == 0) a.queries = w.queries;
  if (std::find(w.dtypes.begin(), w.dtypes.end(), *a.dtype) == w.dtypes.end())
  {
    std::string types;
    for (DType t : w.dtypes) types += (types.empty() ? "" : " or ") + std::string(dtype_flag(t));
    throw UsageError(fmt::format("{} takes --q-dtype {}", w.name, types));
  }
  for (int64_t k : a.ks)
    if (k > ops::kMaxK) throw UsageError(fmt::format("--k {} exceeds the maximum {}", k, ops::kMaxK));
  if (w.family != Family::Csa && a.queries <= 0) throw UsageError("--Q must be positive");
  if (a.head_dim <= 0) throw UsageError("--d must be positive");
  for (int64_t size : a.sizes) {
    if (w.family == Family::Dsa && w.causal_ratio > 0 && size < a.queries)
      throw UsageError(fmt::format("{}: T = {} is below Q = {} (the chunk is the last Q "
                                   "positions of T)", w.name, size, a.queries));
    if (w.family == Family::Csa && size < w.causal_ratio)
      throw UsageError(fmt::format("{}: S = {} holds no key (T = S / {})", w.name, size,
                                   w.causal_ratio));
  }
}

// Returns false when --help was asked for.
bool parse_args(int argc, char** argv, BenchArgs& a) {
  Args args(argc, argv);
  for (std::string flag; args.next(flag);) {
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "--T") a.sizes = parse_sizes(flag, args.value());
    else if (flag == "--Q") a.queries = args.int_value();
    else if (flag == "--k") a.ks = parse_sizes(flag, args.value());
    else if (flag == "--q-dtype" || flag == "--dtype") a.dtype = dtype_value(flag, args.value());
    else if (flag == "--d") a.head_dim = args.int_value();
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--warmup") a.warmup = args.int_value();
    else if (flag == "--check-rows") a.check_rows = args.int_value();
    else if (flag == "--chunk-rows") a.chunk_rows = args.int_value();
    else if (flag == "--no-hint") a.hint = false;
    else if (flag == "--no-tuned") a.tuned = false;
    else if (flag == "--point") a.point = args.value();
    else if (flag == "--compile-only") a.compile_only = true;
    else if (flag == "--key-norms") a.key_norms = true;
    else if (flag == "--seed") a.seed = uint64_t(args.int_value());
    else if (flag == "--ceilings") a.ceilings_path = args.value();
    else if (flag == "--baselines") a.baselines_path = args.value();
    else if (flag == "--anchors") {
      a.anchors_path = args.value();
      if (a.anchors_path.empty()) throw UsageError("--anchors needs a file name");
    }
    else if (flag == "--out") a.out_path = args.value();
    else if (flag == "--shards") a.shards = int(std::min<int64_t>(args.int_value(), 1 << 20)), a.sharded = true;
    else if (!flag.empty() && flag[0] != '-' && !a.workload) a.workload = &find_workload(flag);
    else unknown_argument(flag);
  }
  if (!a.workload) throw UsageError("which workload? one of " + workload_list());
  if (a.repeats < 1) throw UsageError("--repeats must be at least 1");
  if (a.warmup < 0 || a.check_rows.value_or(0) < 0 || a.chunk_rows < 0)
    throw UsageError("--warmup, --check-rows and --chunk-rows must be >= 0");
  if (a.shards < 1 || a.shards > ops::kMaxShardRanks)
    throw UsageError(fmt::format("--shards {} is outside 1..{}", a.shards, ops::kMaxShardRanks));
  if (a.sharded && a.w().name != std::string("knn-ip") &&
      a.w().name != std::string("dsa-prefill"))
    throw UsageError(fmt::format("--shards is for knn-ip and dsa-prefill, not {}", a.w().name));
  if (a.compile_only && a.sharded) throw UsageError("--compile-only builds one GPU's kernels: not with --shards");
  if (a.sharded && !a.anchors_path.empty())
    throw UsageError("--anchors compares one GPU's rows with the engines' records: not with --shards");
  if (a.key_norms && a.w().name != std::string("knn-l2") &&
      a.w().name != std::string("knn-cosine"))
    throw UsageError(fmt::format("--key-norms is for knn-l2 and knn-cosine, not {}", a.w().name));
  if (!a.point.empty()) {
    std::string why;
    if (!ops::point_with_knobs(ops::TopkPoint{}, a.point, &why)) throw UsageError("--point: " + why);
    if (a.w().family == Family::Csa || a.sharded)
      throw UsageError("--point times one topk plan beside the heuristic one: dsa and knn "
                       "workloads on one GPU");
  }
  resolve(a);
  return true;
}
// ---------------------------------------------------------------------------------------
// Ceilings and the floor

// One (workload, size, k) problem's sizes, for FLOP and byte counts.
struct Shape {
  int64_t Q, T;  // rows and keys
  int H, d, k;
  int elem_bytes;
  int causal_ratio;       // 0: dense; row r sees keys [0, (causal_offset + r + 1) / ratio)
  int64_t causal_offset;
  bool weights, kscale;   // inputs the score reads
  bool key_norms;         // |k|^2 given as an input (--key-norms)
  bool corpus_floor;      // knn: the floor is reading the keys once (docs/performance.md)

  int64_t window_end(int64_t row) const {
    return causal_ratio ? std::min(T, (causal_offset + row + 1) / causal_ratio) : T;
  }
  double visible_pairs() const {
    if (!causal_ratio) return double(Q) * double(T);
    return ops::causal_visible_pairs(causal_offset, Q, causal_ratio);
  }
  double flop() const { return 2.0 * visible_pairs() * H * d; }
  double key_bytes() const {
    return double(T) * d * elem_bytes + (kscale ? double(T) * 4 : 0) + (key_norms ? double(T) * 4 : 0);
  }
  // q, k, per-key scale and weights read once.
  double input_bytes() const {
    return double(Q) * H * d * elem_bytes + key_bytes() + (weights ? double(Q) * H * 4 : 0);
  }
  double read_bytes() const { return corpus_floor ? key_bytes() : input_bytes(); }
  double winnow_bytes() const { return read_bytes() + (corpus_floor ? 0 : double(Q) * k * 4); }
  double materialize_bytes() const { return read_bytes() + visible_pairs() * 4; }
};

// ---------------------------------------------------------------------------------------
// Random inputs

// ---------------------------------------------------------------------------------------
// Device side

ops::TensorView view(const rt::DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) {
  return ops::contiguous_view(b.data(), t, shape);
}

// The inputs of the largest size, uploaded once; smaller sizes use the first rows and keys.
struct DeviceInputs {
  rt::DeviceBuffer q, k, w, kscale, key_norms;
  ops::TopkInputs for_shape(const ops::TopkProblem& p, const Shape& s) const {
    ops::TopkInputs in;
    in.q = view(q, p.q_dtype, {s.Q, p.heads, p.head_dim});
    in.k = view(k, p.k_dtype, {s.T, p.head_dim});
    if (s.weights) in.weights = view(w, DType::F32, {s.Q, p.heads});
    if (s.kscale) in.key_scale = view(kscale, DType::F32, {s.T});
    if (s.key_norms) in.key_norms = view(key_norms, DType::F32, {s.T});
    return in;
  }
};

// The rows the check downloads: n rows evenly spread over [0, Q), first and last included.
std::vector<int64_t> rows_to_check(int64_t Q, int64_t n) {
  std::set<int64_t> rows;
  if (n == 1) rows.insert(Q - 1);
  for (int64_t i = 0; n > 1 && i < n; ++i)
    rows.insert(int64_t(double(i) * double(Q - 1) / double(n - 1) + 0.5));
  return {rows.begin(), rows.end()};
}

struct FusedRun {
  Timing t;
  std::vector<int> indices;  // [Q, k], relative to the window start (0 here)
  uint32_t fallback_rows = 0, bad_windows = 0;
  size_t workspace = 0;
  // Device memory taken beyond the inputs and the int32 output (the workspace, measured
  // as the drop of free memory when it is allocated).
  size_t extra_mem = 0;
  ops::ChunkPlan chunks;  // the streaming driver's (csa); {0, 0} for one launch
};

int selected_keys(const ops::TopkOp& op) { return op.problem().k; }
int selected_keys(const ops::StreamTopk& op) { return op.problem().topk.k; }

// Called with the first run's indices on a thread of its own while the timed runs go on
// (every run computes the same indices).
using FirstResult = std::function<void(const std::vector<int>&)>;

// Op: ops::TopkOp (one launch) or ops::StreamTopk (chunks).
template <class Op>
FusedRun run_fused(const Op& op, const ops::TopkInputs& in, int64_t Q, const BenchArgs& a,
                   const std::string& label, const FirstResult& first_result = {}) {
  const int k = selected_keys(op);
  FusedRun r;
  r.workspace = op.workspace_bytes();
  rt::DeviceBuffer idx(size_t(Q) * k * 4);
  const size_t free_before = free_device_memory();
  rt::DeviceBuffer ws(std::max<size_t>(r.workspace, 256));
  r.extra_mem = std::max(ws.size(), free_before - std::min(free_before, free_device_memory()));
  const ops::TensorView out = view(idx, DType::I32, {Q, k});
  // Indices only: what the DSA indexer consumes (scores are optional outputs).
  auto launch = [&](CUstream s) { op.execute(in, &out, nullptr, ws.data(), ws.size(), s); };
  launch(nullptr);  // one untimed run whose indices are checked
  r.indices.resize(size_t(Q) * k);
  idx.download(r.indices.data(), r.indices.size() * 4);
  std::future<void> checking;
  if (first_result) {
    checking = std::async(std::launch::async, [&] { first_result(r.indices); });
  }
  r.t = time_launches(launch, a.warmup, a.repeats, label);
  if (checking.valid()) checking.get();
  // The counters of the last run (every run computes the same).
  uint32_t counters[2];
  rt::check(rt::driver().cuMemcpyDtoH(counters, ws.ptr() + op.counter_offset(), sizeof counters),
            "cuMemcpyDtoH (counters)");
  r.fallback_rows = counters[0];
  r.bad_windows = counters[1];
  return r;
}

struct MaterializeRun {
  Timing t;
  size_t extra_bytes = 0;  // the score matrix + workspace
};

// Materialized rows downloaded for the check: the visible prefix [0, window end) of each.
struct ScoreRows {
  std::vector<int64_t> rows;
  std::vector<std::vector<float>> scores;
};

MaterializeRun run_materialize(const ops::TopkOp& op, const ops::TopkInputs& in,
                               const Shape& s, int64_t check_rows, const BenchArgs& a,
                               ScoreRows& rows) {
  MaterializeRun r;
  const size_t matrix = size_t(s.Q) * size_t(s.T) * 4;
  const size_t ws_bytes = op.workspace_bytes();
  r.extra_bytes = matrix + ws_bytes;
  rt::DeviceBuffer sc(matrix), ws(std::max<size_t>(ws_bytes, 256));
  const ops::TensorView out = view(sc, DType::F32, {s.Q, s.T});
  r.t = time_launches(
      [&](CUstream st) { op.execute(in, nullptr, &out, ws.data(), ws.size(), st); }, a.warmup,
      a.repeats, "materialize");
  // Only the checked rows come back: the whole matrix would not fit host memory at 1M.
  rows.rows = rows_to_check(s.Q, check_rows);
  rows.scores.clear();
  for (int64_t row : rows.rows) {
    const int64_t end = s.window_end(row);
    std::vector<float>& dst = rows.scores.emplace_back(size_t(end));
    rt::check(rt::driver().cuMemcpyDtoH(dst.data(), sc.ptr() + size_t(row) * s.T * 4,
                                        size_t(end) * 4),
              "cuMemcpyDtoH (score row)");
  }
  return r;
}

// ---------------------------------------------------------------------------------------
// Checks

struct CheckResult {
  int64_t rows_checked = 0, rows_differing = 0, rows_malformed = 0;
  std::optional<bool> exact() const {
    if (rows_malformed > 0) return false;
    if (rows_checked == 0) return std::nullopt;
    return rows_differing == 0;
  }
};

// Every fused row: min(k, window) distinct indices in [0, window), then -1 padding.
int64_t malformed_rows(const std::vector<int>& idx, const Shape& s) {
  std::vector<char> bad(size_t(s.Q));
  parallel_for(size_t(s.Q), [&](size_t r) {
    const int64_t window = s.window_end(int64_t(r));
    const int64_t n = std::min<int64_t>(s.k, window);
    std::vector<int> row(&idx[r * s.k], &idx[r * s.k] + s.k);
    bool ok = std::all_of(row.begin() + n, row.end(), [](int v) { return v == -1; });
    std::sort(row.begin(), row.begin() + n);
    ok = ok && (n == 0 || (row[0] >= 0 && row[n - 1] < window));
    ok = ok && std::adjacent_find(row.begin(), row.begin() + n) == row.begin() + n;
    bad[r] = !ok;
  });
  return std::count(bad.begin(), bad.end(), 1);
}

// The checked rows: fused index set == exact select over the materialized scores, bit
// for bit (the same rank order, ties to the smaller index).
CheckResult check(const FusedRun& f, const ScoreRows& m, const Shape& s) {
  CheckResult c;
  c.rows_malformed = malformed_rows(f.indices, s);
  std::vector<char> differs(m.rows.size());
  parallel_for(m.rows.size(), [&](size_t i) {
    const std::vector<float>& sc = m.scores[i];
    differs[i] = !ops::same_selection(&f.indices[size_t(m.rows[i]) * s.k], s.k, 0, sc.data(), 0,
                                      int64_t(sc.size()));
  });
  for (size_t i = 0; i < m.rows.size(); ++i, ++c.rows_checked) {
    if (differs[i] && c.rows_differing++ < 3)
      fmt::print(stderr, "  row {}: the fused keys differ from the exact selection\n", m.rows[i]);
  }
  return c;
}

// n distinct random rows of [0, Q), the last row (the widest causal window) among them.
std::vector<int64_t> random_rows(int64_t Q, int64_t n, uint64_t seed) {
  std::set<int64_t> rows;
  if (n > 0 && Q > 0) rows.insert(Q - 1);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(Q - 1, 0));
  while (int64_t(rows.size()) < std::min(n, Q)) rows.insert(pick(rng));
  return {rows.begin(), rows.end()};
}

// Elements [first, first + count) of a device tensor's storage, decoded to fp32.
std::vector<float> download_values(const ops::TensorView& t, int64_t first, int64_t count) {
  const size_t eb = size_t(ops::dtype_bytes(t.dtype));
  std::vector<uint8_t> bytes(size_t(count) * eb);
  const CUdeviceptr src = reinterpret_cast<CUdeviceptr>(t.data) + size_t(first) * eb;
  rt::check(rt::driver().cuMemcpyDtoH(bytes.data(), src, bytes.size()), "cuMemcpyDtoH (check)");
  return ops::decode_values(t.dtype, bytes.data(), size_t(count));
}

// Sizes too large for the materialized matrix: `n` random rows recomputed on the CPU (in
// double, from the device's own inputs) and compared with the fused rows up to
// accumulation error (ops::near_reference_selection).
struct ReferenceRows {
  std::vector<int64_t> rows;  // the checked rows of the sequence
  ops::HostInputs host;       // their inputs (row i of host is rows[i]), all keys
  ops::TopkProblem problem;   // the same score and k over each row's own window
};

// Downloads the checked rows' inputs (before the timed runs: the copies would wait for
// them).
ReferenceRows reference_rows(const ops::TopkProblem& base, const Shape& s,
                             const ops::TopkInputs& in, int64_t n, uint64_t seed) {
  ReferenceRows ref;
  ref.rows = random_rows(s.Q, n, seed);
  const int64_t H = s.H, d = s.d;
  ops::HostInputs& h = ref.host;
  h.rows = int64_t(ref.rows.size());
  h.num_keys = s.T;
  h.heads = s.H;
  h.dim = s.d;
  h.k = download_values(in.k, 0, s.T * d);
  if (s.kscale) h.kscale = download_values(in.key_scale, 0, s.T);
  if (s.key_norms) h.key_norms = download_values(in.key_norms, 0, s.T);
  for (int64_t row : ref.rows) {
    const std::vector<float> q = download_values(in.q, row * H * d, H * d);
    h.q.insert(h.q.end(), q.begin(), q.end());
    if (s.weights) {
      const std::vector<float> w = download_values(in.weights, row * H, H);
      h.w.insert(h.w.end(), w.begin(), w.end());
    }
    h.window_start.push_back(0);
    h.window_end.push_back(int(s.window_end(row)));
  }
  ref.problem = base;
  ref.problem.k = s.k;
  ref.problem.window = ops::WindowKind::Ranges;
  return ref;
}

// Compares the fused rows with the recomputed ones on every core but one (the timed
// runs go on beside it), with progress on stderr.
CheckResult check_by_reference(const std::vector<int>& indices, const ReferenceRows& ref,
                               const Shape& s, const std::string& label) {
  CheckResult c;
  c.rows_malformed = malformed_rows(indices, s);
  const int64_t m = int64_t(ref.rows.size());
  std::vector<char> differs(static_cast<size_t>(m));
  std::atomic<int64_t> done{0};
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(
      size_t(m),
      [&](size_t i) {
        std::vector<int64_t> got;
        const int* fused = &indices[size_t(ref.rows[i]) * s.k];
        for (int j = 0; j < s.k; ++j)
          if (fused[j] >= 0) got.push_back(fused[j]);
        differs[i] = !ops::near_reference_selection(ref.problem, ref.host, int64_t(i), got);
        const int64_t now = ++done;
        if (now % 100 == 0 || now == m)
          fmt::print(stderr, "{}: reference check {}/{} rows ({:.1f} s)\n", label, now, m,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      },
      1);
  for (int64_t i = 0; i < m; ++i, ++c.rows_checked) {
    if (differs[i] && c.rows_differing++ < 3)
      fmt::print(stderr, "  row {}: the fused keys differ from the CPU reference\n", ref.rows[i]);
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// Records

struct Meta {
  std::string gpu, commit, date;
  Ceilings ceilings;
  std::string baselines;  // bench/torch_baselines.py's JSON, or empty
  // WINNOW_NVRTC_OPTIONS of the run and WINNOW_TOPK_PIPELINE=1 or 2 (a kernel variant),
  // recorded as "variant"; empty: none.
  std::string variant;
  const AnchorFile* anchors = nullptr;  // --anchors; null: none
};

// The PyTorch baseline of one size from --baselines, by the keys torch_baselines.py
// writes: the top-k half of materialize (dsa, csa) or the whole torch retrieval (knn).
struct TorchBaseline {
  const char* impl;  // the record's impl
  const char* ratio_field;
  double ms;
};
std::optional<TorchBaseline> torch_baseline(const BenchArgs& a, const Meta& m, const Shape& s) {
  if (m.baselines.empty()) return std::nullopt;
  if (a.w().family == Family::Knn) {
    // knn-cosine: the inner-product time (torch on pre-normalised vectors).
    const char* kind = std::strcmp(a.w().name, "knn-l2") == 0 ? "knn_l2_ms" : "knn_ip_ms";
    const auto ms = json_number(m.baselines, fmt::format("{}:{}x{}x{}x{}", kind, s.Q, s.T, s.d, s.k));
    if (!ms) return std::nullopt;
    return TorchBaseline{"torch", "ratio_to_torch", *ms};
  }
  const auto ms = json_number(m.baselines, fmt::format("topk_ms:{}x{}x{}", s.Q, s.T, s.k));
  if (!ms) return std::nullopt;
  return TorchBaseline{"materialize+torch.topk", "ratio_to_materialize_topk", *ms};
}

// A baseline record with PyTorch in it: knn's torch retrieval as measured, or this run's
// materialize time plus torch.topk over logits of the same size (no top-k without the
// materialize run).
struct Baseline {
  const char* impl;
  const char* ratio_field;
  Timing t;
  double torch_ms;
  size_t extra_bytes;
};


// One (size, k)'s results, for the records and the table.
struct SizeResult {
  Shape shape;
  FusedRun fused;
  // The tuning database's plan for this shape ("winnow-tuned"), when it has one that
  // differs from the heuristic plan.
  std::optional<FusedRun> tuned;
  std::string tuned_point;
  CheckResult tuned_check;
  std::optional<MaterializeRun> mat;  // absent when the matrix does not fit the device
  CheckResult check;
  double floor_ms = 0, flop_floor_ms = 0, byte_floor_ms = 0;
};

std::optional<Baseline> with_torch(const BenchArgs& a, const Meta& m, const SizeResult& r) {
  const auto tb = torch_baseline(a, m, r.shape);
  if (!tb) return std::nullopt;
  const float ms = float(tb->ms);
  if (a.w().family == Family::Knn) {  // fp16 logits, B x N
    return Baseline{tb->impl, tb->ratio_field, Timing{ms, ms, ms}, tb->ms,
                    size_t(r.shape.Q) * size_t(r.shape.T) * 2};
  }
  if (!r.mat) return std::nullopt;
  const Timing& t = r.mat->t;
  return Baseline{tb->impl, tb->ratio_field, Timing{t.median + ms, t.min + ms, t.max + ms},
                  tb->ms, r.mat->extra_bytes};
}

// docs/performance.md's parameter names per workload family.
std::string params_json(const BenchArgs& a, const Shape& s) {
  const char* t = dtype_flag(*a.dtype);
  switch (a.w().family) {
    case Family::Csa:
      return fmt::format("{{\"S\": {}, \"H\": {}, \"d\": {}, \"k\": {}, \"m\": {}, \"dtype\": "
                         "\"{}\", \"T\": {}, \"key_scale\": {}}}",
                         s.Q, s.H, s.d, s.k, s.causal_ratio, t, s.T, s.kscale);
    case Family::Knn:
      return fmt::format("{{\"N\": {}, \"d\": {}, \"k\": {}, \"batch\": {}, \"dtype\": \"{}\", "
                         "\"key_norms\": {}}}",
                         s.T, s.d, s.k, s.Q, t, s.key_norms);
    default:
      return fmt::format("{{\"Q\": {}, \"T\": {}, \"H\": {}, \"d\": {}, \"k\": {}, \"q_dtype\": "
                         "\"{}\", \"k_dtype\": \"{}\"}}",
                         s.Q, s.T, s.H, s.d, s.k, t, t);
  }
}

// "T=65536", "S=32768", "N=1048576": the size in the workload's own terms.
std::string size_name(const BenchArgs& a, const Shape& s) {
  switch (a.w().family) {
    case Family::Csa: return fmt::format("S={}", s.Q);
    case Family::Knn: return fmt::format("N={}", s.T);
    default: return fmt::format("T={}", s.T);
  }
}

// "T=65536 k=2048": the table's size column and the progress lines' prefix.
std::string size_label(const BenchArgs& a, const Shape& s) {
  return fmt::format("{} k={}", size_name(a, s), s.k);
}

// The params the engines' records (tools/anchor_records.h) give this row's problem;
// nullopt where no record can be the same problem (csa; dsa inputs other than fp8).
std::optional<AnchorParams> anchor_params(const BenchArgs& a, const Shape& s) {
  switch (a.w().family) {
    case Family::Dsa:
      if (*a.dtype != DType::E4M3) return std::nullopt;
      return AnchorParams{{"Q", double(s.Q)}, {"T", double(s.T)}, {"H", double(s.H)},
                          {"d", double(s.d)}, {"k", double(s.k)}};
    case Family::Knn:
      return AnchorParams{{"B", double(s.Q)}, {"N", double(s.T)}, {"d", double(s.d)},
                          {"k", double(s.k)}, {"dtype", std::string(dtype_flag(*a.dtype))}};
    default: return std::nullopt;
  }
}

// Why a row has no anchor params, for the table.
std::string no_anchor_params(const BenchArgs& a) {
  return a.w().family == Family::Dsa ? "no record (the engines' records are fp8 e4m3)"
                                     : "no record";
}

// winnow_ms against the records of this row's problem; empty without --anchors.
std::vector<AnchorRatio> ratios_to_anchors(const BenchArgs& a, const Meta& m, const Shape& s,
                                           double winnow_ms) {
  const std::optional<AnchorParams> params = anchor_params(a, s);
  if (!m.anchors || !params) return {};
  return anchor_ratios(*m.anchors, a.w().name, *params, winnow_ms);
}

double ceiling_tflops(const Ceilings& c, DType t) {
  return t == DType::E4M3 ? c.fp8_tflops : c.bf16_tflops;
}

std::string record(const BenchArgs& a, const Meta& m, const SizeResult& r, const char* impl,
                   const Timing& t, double bytes, size_t extra_mem, std::string extra_fields) {
  const Shape& s = r.shape;
  const std::string variant =
      m.variant.empty() ? "" : fmt::format("\"variant\": {}, ", json_string(m.variant));
  return fmt::format(
      "{{\"workload\": \"{}\", {}\"impl\": \"{}\", \"params\": {}, "
      "\"ms_median\": {:.4f}, \"ms_min\": {:.4f}, \"ms_max\": {:.4f}, \"tflops\": {:.2f}, "
      "\"gbps\": {:.2f}, \"floor_ms\": {:.4f}, \"ratio_to_floor\": {:.4f}, "
      "\"extra_mem_bytes\": {}{}, \"repeats\": {}, \"warmup\": {}, \"gpu\": {}, "
      "\"commit\": \"{}\", \"date\": \"{}\"}}",
      a.w().name, variant, impl, params_json(a, s), t.median, t.min, t.max, s.flop() / t.median / 1e9,
      bytes / t.median / 1e6, r.floor_ms, t.median / r.floor_ms, extra_mem, extra_fields,
      a.repeats, a.warmup, json_string(m.gpu), m.commit, m.date);
}

std::vector<std::string> size_records(const BenchArgs& a, const Meta& m, const SizeResult& r) {
  std::vector<std::string> out;
  const Shape& s = r.shape;
  const std::string exact = json_bool(r.check.exact());
  std::string wf = fmt::format(
      ", \"exact\": {}, \"fallbacks\": {}, \"bad_windows\": {}, \"checked_rows\": {}, "
      "\"rows_differing\": {}, \"rows_malformed\": {}, \"outputs\": \"indices\"",
      exact, r.fused.fallback_rows, r.fused.bad_windows, r.check.rows_checked,
      r.check.rows_differing, r.check.rows_malformed);
  if (r.mat) wf += fmt::format(", \"ratio_to_materialize\": {:.4f}",
                               r.fused.t.median / r.mat->t.median);
  const std::optional<Baseline> torch = with_torch(a, m, r);
  if (torch) wf += fmt::format(", \"{}\": {:.4f}", torch->ratio_field, r.fused.t.median / torch->t.median);
  if (m.anchors)
    wf += anchor_fields(a.anchors_path, ratios_to_anchors(a, m, s, r.fused.t.median));
  if (a.w().family == Family::Csa) {
    // docs/performance.md's csa floor is the bf16 one, also for fp8 runs.
    const double bf16_floor_ms = s.flop() / (m.ceilings.bf16_tflops * 1e9);
    wf += fmt::format(", \"ratio_to_bf16_floor\": {:.4f}, \"workspace_bytes\": {}, "
                      "\"chunks\": {}, \"chunk_rows\": {}, \"hint\": {}, \"check\": \"{}\"",
                      r.fused.t.median / bf16_floor_ms, r.fused.workspace, r.fused.chunks.chunks,
                      r.fused.chunks.chunk_rows, a.hint,
                      r.mat ? "materialize" : "cpu_reference");
  }
  out.push_back(record(a, m, r, "winnow", r.fused.t, s.winnow_bytes(), r.fused.extra_mem, wf));
  if (r.tuned) {
    out.push_back(record(
        a, m, r, "winnow-tuned", r.tuned->t, s.winnow_bytes(), r.tuned->extra_mem,
        fmt::format(", \"exact\": {}, \"fallbacks\": {}, \"bad_windows\": {}, "
                    "\"checked_rows\": {}, \"rows_differing\": {}, \"rows_malformed\": {}, "
                    "\"outputs\": \"indices\", \"tuned_point\": {}, \"ratio_to_winnow\": {:.4f}",
                    json_bool(r.tuned_check.exact()), r.tuned->fallback_rows,
                    r.tuned->bad_windows, r.tuned_check.rows_checked,
                    r.tuned_check.rows_differing, r.tuned_check.rows_malformed,
                    json_string(r.tuned_point), r.tuned->t.median / r.fused.t.median) +
            (m.anchors ? anchor_fields(a.anchors_path,
                                       ratios_to_anchors(a, m, s, r.tuned->t.median))
                       : "")));
  }
  if (r.mat) {
    out.push_back(record(a, m, r, "materialize", r.mat->t, s.materialize_bytes(),
                         r.mat->extra_bytes,
                         fmt::format(", \"exact\": {}, \"fallbacks\": 0, \"includes_topk\": false",
                                     exact)));
  }
  if (torch) {
    out.push_back(record(a, m, r, torch->impl, torch->t, s.materialize_bytes(), torch->extra_bytes,
                         fmt::format(", \"exact\": null, \"fallbacks\": 0, \"includes_topk\": "
                                     "true, \"torch_ms\": {:.4f}, \"baselines\": \"{}\"",
                                     torch->torch_ms, a.baselines_path)));
  }
  const Timing floor{float(r.floor_ms), float(r.floor_ms), float(r.floor_ms)};
  const Ceilings& c = m.ceilings;
  out.push_back(record(
      a, m, r, "floor", floor, s.winnow_bytes(), 0,
      fmt::format(", \"exact\": null, \"fallbacks\": 0, \"flop_floor_ms\": {:.4f}, "
                  "\"byte_floor_ms\": {:.4f}, \"ceiling_tflops\": {}, \"copy_tbps\": {}, "
                  "\"ceilings\": \"{}\"",
                  r.flop_floor_ms, r.byte_floor_ms, ceiling_tflops(c, *a.dtype), c.copy_tbps,
                  c.source())));
  return out;
}

void print_table(const BenchArgs& a, const Meta& meta, const std::vector<SizeResult>& results) {
  fmt::print(stderr, "\n{:<19} {:>18} {:<22} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11} {:>6}\n",
             "workload", "size", "impl", "ms", "TFLOP/s", "GB/s", "/floor", "/mat", "extra MB",
             "exact");
  for (const SizeResult& r : results) {
    const double flop = r.shape.flop();
    const std::string exact = json_bool(r.check.exact()), label = size_label(a, r.shape);
    auto row = [&](const char* impl, double ms, double bytes, std::string vs_mat, double extra) {
      const bool measured = std::strcmp(impl, "floor") != 0;
      fmt::print(stderr,
                 "{:<19} {:>18} {:<22} {:>10.3f} {:>9.1f} {:>9.0f} {:>9.3f} {:>9} {:>11.1f} {:>6}\n",
                 a.w().name, label, impl, ms, flop / ms / 1e9, bytes / ms / 1e6, ms / r.floor_ms,
                 vs_mat, extra / 1e6, measured ? exact : "-");
    };
    const std::string ratio =
        r.mat ? fmt::format("{:.3f}", r.fused.t.median / r.mat->t.median) : "-";
    row("winnow", r.fused.t.median, r.shape.winnow_bytes(), ratio, double(r.fused.extra_mem));
    if (r.tuned)
      row("winnow-tuned", r.tuned->t.median, r.shape.winnow_bytes(),
          r.mat ? fmt::format("{:.3f}", r.tuned->t.median / r.mat->t.median) : "-",
          double(r.tuned->extra_mem));
    if (r.mat)
      row("materialize", r.mat->t.median, r.shape.materialize_bytes(), "1.000",
          double(r.mat->extra_bytes));
    if (const auto torch = with_torch(a, meta, r))
      row(torch->impl, torch->t.median, r.shape.materialize_bytes(),
          r.mat ? fmt::format("{:.3f}", torch->t.median / r.mat->t.median) : "-",
          double(torch->extra_bytes));
    row("floor", r.floor_ms, r.shape.winnow_bytes(), "-", 0);
  }
  if (!meta.anchors) return;
  std::vector<AnchorRow> rows;
  for (const SizeResult& r : results) {
    auto add = [&](const char* impl, double ms) {
      AnchorRow& row = rows.emplace_back();
      row.workload = a.w().name;
      row.size = size_label(a, r.shape);
      row.impl = impl;
      row.winnow_ms = ms;
      row.ratios = ratios_to_anchors(a, meta, r.shape, ms);
      if (!anchor_params(a, r.shape)) row.why_none = no_anchor_params(a);
    };
    add("winnow", r.fused.t.median);
    if (r.tuned) add("winnow-tuned", r.tuned->t.median);
  }
  fmt::print(stderr, "{}{}", anchor_table(a.anchors_path, rows),
             unmatched_records(*meta.anchors, rows));
}

// ---------------------------------------------------------------------------------------
// The run

ops::TopkProblem make_problem(const BenchArgs& a, const rt::Context& ctx) {
  return workload_problem(a.w(), *a.dtype, a.head_dim, ops::device_arch(ctx));
}

// Rows and keys of one size (workload_rows_keys).
Shape make_shape(const BenchArgs& a, const ops::TopkProblem& p, int64_t size, int k) {
  const Workload& w = a.w();
  const ir::Uses u = ir::uses(p.score);
  Shape s{};
  const bool csa = w.family == Family::Csa;
  const RowsKeys rk = workload_rows_keys(w, size, a.queries);
  s.Q = rk.rows;
  s.T = rk.keys;
  s.H = p.heads, s.d = p.head_dim, s.k = k;
  s.elem_bytes = ops::dtype_bytes(p.k_dtype);
  s.causal_ratio = w.causal_ratio;
  // dsa: the chunk is the last Q positions of T; csa: the positions start at 0.
  s.causal_offset = w.causal_ratio && !csa ? s.T - s.Q : 0;
  s.weights = u.w, s.kscale = u.kscale;
  s.key_norms = a.key_norms && u.ksq;
  s.corpus_floor = w.family == Family::Knn;
  return s;
}

ops::TopkProblem sized(ops::TopkProblem p, const Shape& s, ops::Mode mode) {
  p.mode = mode;
  p.k = s.k;
  if (s.causal_ratio) {
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = s.causal_ratio;
    p.causal_offset = s.causal_offset;
  }
  return p;
}

std::unique_ptr<ops::TopkOp> build_op(const ops::TopkProblem& p, const rt::Context& ctx,
                                      rt::CubinCache& cache, const backend::Backend& be) {
  auto op = ops::TopkOp::create(p, &ctx);
  op->build(cache, be);
  return op;
}

// Random inputs for the largest shape: q and k ~ N(0, 1), w ~ U(-1, 1), key scales ~
// U(0.5, 2) (as ops::random_problem draws them).
DeviceInputs make_inputs(const ops::TopkProblem& p, const Shape& s, uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  fmt::print(stderr, "inputs: q {} x {} x {}, k {} x {} ({}), generated and uploaded in ... ",
             s.Q, p.heads, p.head_dim, s.T, p.head_dim, dtype_flag(p.k_dtype));
  std::fflush(stderr);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  DeviceInputs in;
  in.q = random_device_tensor(p.q_dtype, size_t(s.Q) * p.heads * p.head_dim, normal, 4 * seed);
  in.k = random_device_tensor(p.k_dtype, size_t(s.T) * p.head_dim, normal, 4 * seed + 1);
  if (s.weights)
    in.w = random_device_tensor(DType::F32, size_t(s.Q) * p.heads,
                                std::uniform_real_distribution<float>(-1.0f, 1.0f), 4 * seed + 2);
  if (s.kscale)
    in.kscale = random_device_tensor(DType::F32, size_t(s.T),
                                     std::uniform_real_distribution<float>(0.5f, 2.0f),
                                     4 * seed + 3);
  if (s.key_norms) in.key_norms = device_key_norms(in.k, p.k_dtype, s.T, p.head_dim);
  fmt::print(stderr, "{:.1f} s ({:.1f} GB)\n", seconds_since(t0),
             (in.q.size() + in.k.size() + in.w.size() + in.kscale.size()) / 1e9);
  return in;
}

bool matrix_fits(size_t bytes) {
  size_t free = 0, total = 0;
  rt::check(rt::driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  // Leave room for the fused buffers still alive and the allocator's granularity.
  return bytes + (size_t(1) << 30) <= free;
}

// Rows the check downloads: --check-rows, or 64 (knn: every row when the matrix is at
// most 2 GiB; csa: every row).
int64_t check_rows(const BenchArgs& a, const Shape& s) {
  if (a.check_rows) return std::min<int64_t>(*a.check_rows, s.Q);
  const bool small = double(s.Q) * double(s.T) * 4 <= double(1ull << 31);
  const bool all = a.w().family == Family::Csa || (a.w().family == Family::Knn && small);
  return all ? s.Q : std::min<int64_t>(64, s.Q);
}

// The fused run of one (size, k): csa through the streaming driver, the others in one
// launch.
FusedRun run_winnow(const BenchArgs& a, const ops::TopkProblem& p, const ops::TopkInputs& in,
                    const Shape& s, const rt::Context& ctx, rt::CubinCache& cache,
                    const backend::Backend& be, const std::string& label,
                    const FirstResult& first_result) {
  auto t0 = std::chrono::steady_clock::now();
  if (a.w().family != Family::Csa) {
    auto op = build_op(p, ctx, cache, be);
    fmt::print(stderr, "{}: winnow kernel built in {:.1f} s: {}\n", label, seconds_since(t0),
               op->launch_info());
    return run_fused(*op, in, s.Q, a, label, first_result);
  }
  ops::StreamProblem sp;
  sp.topk = p;
  sp.chunk_rows = a.chunk_rows;
  sp.hint = a.hint;
  auto op = ops::StreamTopk::create(sp, &ctx);
  op->build(cache, be);
  const ops::ChunkPlan chunks = op->chunks_for(s.Q);
  fmt::print(stderr, "{}: winnow kernel built in {:.1f} s: {}; {} chunks of {} rows, hint {}\n",
             label, seconds_since(t0), op->op().launch_info(), chunks.chunks, chunks.chunk_rows,
             a.hint ? "on" : "off");
  FusedRun r = run_fused(*op, in, s.Q, a, label, first_result);
  r.chunks = chunks;
  return r;
}

// One size: the materialize baseline once, then the fused kernel of every k, each checked
// against the materialized rows (csa above kCsaMaterializeMax: against the CPU reference).
std::vector<SizeResult> run_size(const BenchArgs& a, const ops::TopkProblem& base, int64_t size,
                                 const DeviceInputs& dev, const rt::Context& ctx,
                                 rt::CubinCache& cache, const backend::Backend& be,
                                 const Ceilings& c, const rt::TuningDb* db) {
  const Shape s0 = make_shape(a, base, size, int(a.ks.front()));
  const std::string at = size_name(a, s0);
  const ops::TopkInputs in = dev.for_shape(base, s0);

  std::optional<MaterializeRun> mat;
  ScoreRows rows;
  std::string mat_plan;  // the materialize plan the rows come from
  const size_t matrix = size_t(s0.Q) * size_t(s0.T) * 4;
  const bool csa = a.w().family == Family::Csa;
  if (csa && size > kCsaMaterializeMax) {
    fmt::print(stderr, "{}: S > {}: no materialize run; {} random rows are recomputed on the "
               "CPU\n", at, kCsaMaterializeMax, a.check_rows.value_or(kCsaReferenceRows));
  } else if (matrix_fits(matrix)) {
    auto t0 = std::chrono::steady_clock::now();
    auto op = build_op(sized(base, s0, ops::Mode::Materialize), ctx, cache, be);
    fmt::print(stderr, "{}: materialize kernel built in {:.1f} s: {}\n", at, seconds_since(t0),
               op->launch_info());
    t0 = std::chrono::steady_clock::now();
    mat = run_materialize(*op, in, s0, check_rows(a, s0), a, rows);
    mat_plan = op->plan_text();
    fmt::print(stderr, "{}: materialize {:.3f} ms median, {} rows downloaded ({:.1f} s)\n", at,
               mat->t.median, rows.rows.size(), seconds_since(t0));
  } else {
    fmt::print(stderr, "{}: the {:.1f} GB score matrix does not fit the device: no "
               "materialize run, only the form of the fused rows is checked\n", at, matrix / 1e9);
  }

  std::vector<SizeResult> out;
  for (int64_t k : a.ks) {
    SizeResult& r = out.emplace_back();
    r.shape = make_shape(a, base, size, int(k));
    const Shape& s = r.shape;
    const std::string label = size_label(a, s);
    r.flop_floor_ms = s.flop() / (ceiling_tflops(c, *a.dtype) * 1e9);
    r.byte_floor_ms = s.winnow_bytes() / (c.copy_tbps * 1e9);
    // The physical limit is the larger: FLOP for dsa and csa, bytes for knn.
    r.floor_ms = std::max(r.flop_floor_ms, r.byte_floor_ms);

    auto t0 = std::chrono::steady_clock::now();
    // csa above kCsaMaterializeMax: the CPU reference checks the first run's rows while
    // the timed runs go on.
    const bool by_reference = csa && size > kCsaMaterializeMax;
    std::optional<ReferenceRows> ref;
    if (by_reference) {
      ref = reference_rows(sized(base, s, ops::Mode::TopK), s, in,
                           a.check_rows.value_or(kCsaReferenceRows), a.seed + uint64_t(k));
    }
    CheckResult ref_check;
    FirstResult checker;
    if (by_reference) {
      checker = [&](const std::vector<int>& idx) {
        ref_check = check_by_reference(idx, *ref, s, label);
      };
    }
    r.fused = run_winnow(a, sized(base, s, ops::Mode::TopK), in, s, ctx, cache, be, label,
                         checker);
    fmt::print(stderr, "{}: winnow {:.3f} ms median ({} runs, {:.1f} s{})\n", label,
               r.fused.t.median, 1 + a.warmup + a.repeats, seconds_since(t0),
               by_reference ? ", with the reference check beside them" : "");

    t0 = std::chrono::steady_clock::now();
    r.mat = mat;
    r.check = by_reference ? ref_check : check(r.fused, rows, s);
    fmt::print(stderr, "{}: check of {} rows: {} differing, {} of {} rows malformed ({:.1f} s)\n",
               label, r.check.rows_checked, r.check.rows_differing, r.check.rows_malformed, s.Q,
               seconds_since(t0));
    r.fused.indices = {};  // the table and the records need only the timings

    // The tuned plan of this shape, as TUNED_IF_PRESENT would build it, checked the same way.
    const ops::TopkProblem p = sized(base, s, ops::Mode::TopK);
    const ops::TopkShape tune_shape{s.Q, s.T};
    std::optional<ops::TunedPoint> found;
    if (!a.point.empty()) {
      std::string why;
      const auto point = ops::point_with_knobs(ops::point_of(p), a.point, &why);
      if (!point) throw UsageError("--point: " + why);
      found = ops::TunedPoint{*point, {}};
    } else if (db) {
      found = ops::find_tuned_point(*db, ops::topk_tuning_key(p, &ctx, be, tune_shape), p, &ctx);
    }
    if (found && found->point == ops::point_of(p)) {
      fmt::print(stderr, "{}: the tuned plan is the heuristic one: no winnow-tuned record\n", label);
    } else if (found) {
      r.tuned_point = found->point.text();
      t0 = std::chrono::steady_clock::now();
      CheckResult tuned_ref_check;
      FirstResult tuned_checker;
      if (by_reference) {
        tuned_checker = [&](const std::vector<int>& idx) {
          tuned_ref_check = check_by_reference(idx, *ref, s, label + " tuned");
        };
      }
      r.tuned = run_winnow(a, ops::with_point(p, found->point), in, s, ctx, cache, be,
                           label + " tuned", tuned_checker);
      // A point whose materialize plan differs from the default's (another row block or key
      // tile, another kernel form) may score with other roundings: its rows are checked against
      // its own materialize, downloaded from one untimed run.
      const ScoreRows* tuned_rows = &rows;
      ScoreRows own_rows;
      if (!by_reference && mat) {
        std::unique_ptr<ops::TopkOp> own;
        try {
          own = build_op(ops::with_point(sized(base, s0, ops::Mode::Materialize), found->point),
                         ctx, cache, be);
        } catch (const std::exception& e) {
          fmt::print(stderr, "{}: the tuned plan's materialize did not build ({}): its rows are "
                     "checked against the heuristic plan's\n", label, e.what());
        }
        if (own && own->plan_text() != mat_plan) {
          BenchArgs once = a;
          once.warmup = 0;
          once.repeats = 1;
          run_materialize(*own, in, s0, check_rows(a, s0), once, own_rows);
          tuned_rows = &own_rows;
          fmt::print(stderr, "{}: the tuned plan materializes with another plan: its rows are "
                     "checked against its own materialize\n", label);
        }
      }
      r.tuned_check = by_reference ? tuned_ref_check : check(*r.tuned, *tuned_rows, s);
      fmt::print(stderr, "{}: winnow-tuned {:.3f} ms median ({:.3f}x the heuristic plan; {}), "
                 "{} of {} checked rows differing ({:.1f} s)\n",
                 label, r.tuned->t.median, r.tuned->t.median / r.fused.t.median, r.tuned_point,
                 r.tuned_check.rows_differing, r.tuned_check.rows_checked, seconds_since(t0));
      r.tuned->indices = {};
    }
  }
  return out;
}

// --compile-only: every kernel run_size builds (tuned plans aside; --point's plan too), into the kernel
// cache for sm_90a by $WINNOW_BACKEND, with no device: the same problems, so the same keys
// a GPU run of the same arguments looks up (the plans' shared-memory limit is the default,
// the H200's; the retrieval mode's grid is not in its key).
int compile_only_main(const BenchArgs& a, const AnchorFile* anchors) {
  const auto be = ops::choose_backend(nullptr);
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  const ops::TopkProblem base = workload_problem(a.w(), *a.dtype, a.head_dim, backend::parse_arch("sm_90a"));
  fmt::print(stderr, "winnow bench {} --compile-only: {} {} into {}\n", a.w().name, be->name(),
             be->version(), rt::default_cache_dir().string());
  auto built = [&](const std::string& what, const std::string& key, std::chrono::steady_clock::time_point t0) {
    fmt::print(stderr, "  {}: {} ({:.1f} s)\n", what, key.substr(0, 16), seconds_since(t0));
  };
  if (anchors) {
    // The records each timed row would be compared with; no row is timed here.
    for (int64_t size : a.sizes)
      for (int64_t k : a.ks) {
        const Shape s = make_shape(a, base, size, int(k));
        const std::optional<AnchorParams> params = anchor_params(a, s);
        std::vector<std::string> impls;
        if (params)
          for (const AnchorRecord* r : matching_records(*anchors, a.w().name, *params))
            impls.push_back(r->error.empty() ? r->impl : r->impl + " (error: " + r->error + ")");
        fmt::print(stderr, "anchors: {}: {}\n", size_label(a, s),
                   impls.empty() ? (params ? "no record" : no_anchor_params(a))
                                 : fmt::format("{} records: {}", impls.size(), fmt::join(impls, ", ")));
      }
    fmt::print(stderr, "anchors: --compile-only: no time taken, no ratio to the records\n");
  }
  for (int64_t size : a.sizes) {
    const Shape s0 = make_shape(a, base, size, int(a.ks.front()));
    if (!(a.w().family == Family::Csa && size > kCsaMaterializeMax)) {
      const auto t0 = std::chrono::steady_clock::now();
      auto op = ops::TopkOp::create(sized(base, s0, ops::Mode::Materialize), nullptr);
      op->build(cache, *be);
      built(size_name(a, s0) + " materialize", op->content_key(), t0);
    }
    for (int64_t k : a.ks) {
      const Shape s = make_shape(a, base, size, int(k));
      const auto t0 = std::chrono::steady_clock::now();
      if (a.w().family == Family::Csa) {
        ops::StreamProblem sp;
        sp.topk = sized(base, s, ops::Mode::TopK);
        sp.chunk_rows = a.chunk_rows;
        sp.hint = a.hint;
        auto op = ops::StreamTopk::create(sp, nullptr);
        op->build(cache, *be);
        built(size_label(a, s), op->op().content_key(), t0);
      } else {
        const ops::TopkProblem p = sized(base, s, ops::Mode::TopK);
        auto op = ops::TopkOp::create(p, nullptr);
        op->build(cache, *be);
        built(size_label(a, s), op->content_key(), t0);
        if (!a.point.empty()) {
          const auto t1 = std::chrono::steady_clock::now();
          std::string why;
          auto pop = ops::TopkOp::create(
              ops::with_point(p, *ops::point_with_knobs(ops::point_of(p), a.point, &why)), nullptr);
          pop->build(cache, *be);
          built(size_label(a, s) + " --point", pop->content_key(), t1);
        }
      }
    }
  }
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "block-select") return run_bench_block(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "jit") return run_bench_jit(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "dsa-decode") return run_bench_decode(argc, argv);
  BenchArgs a;
  if (!parse_args(argc, argv, a)) {
    fmt::print("{}", kHelp);
    return 0;
  }
  if (a.sharded) {
    ShardBenchArgs sa;
    sa.workload = a.workload;
    sa.sizes = a.sizes;
    sa.ks = a.ks;
    sa.queries = a.queries;
    sa.head_dim = a.head_dim;
    sa.dtype = *a.dtype;
    sa.shards = a.shards;
    sa.repeats = a.repeats;
    sa.warmup = a.warmup;
    sa.seed = a.seed;
    sa.out_path = a.out_path;
    return run_bench_shards(sa);
  }
  // The records are read and checked before anything is built or timed.
  std::optional<AnchorFile> anchors;
  if (!a.anchors_path.empty()) {
    anchors = read_anchor_records(a.anchors_path);
    fmt::print(stderr, "{}", anchor_file_summary(*anchors));
  }
  if (a.compile_only) return compile_only_main(a, anchors ? &*anchors : nullptr);
  if (!bench_gpu_present()) return 1;
  rt::Context ctx(0);
  // The variant: WINNOW_NVRTC_OPTIONS, and WINNOW_TOPK_PIPELINE=1 (the pipelined plan).
  std::string variant = variant_with_nvrtc_options("");
  // The backend, where not NVRTC (WINNOW_BACKEND=llvm: kernels from a cache that
  // --compile-only filled where LLVM is installed).
  const auto be = ops::choose_backend(nullptr);
  if (be->name() != "nvrtc") variant += (variant.empty() ? "" : " ") + ("WINNOW_BACKEND=" + be->name());
  if (const std::string form = rt::env_get("WINNOW_TOPK_PIPELINE").value_or(""); form == "1")
    variant += (variant.empty() ? "" : " ") + ("WINNOW_TOPK_PIPELINE=" + form);
  Meta meta{ctx.info().name, winnow::build_id(), utc_date(), read_ceilings(a.ceilings_path, ctx.info().name), "",
            variant};
  if (!a.baselines_path.empty())
    meta.baselines = read_text(a.baselines_path, "baselines", "no torch records").value_or("");
  if (anchors) {
    meta.anchors = &*anchors;
    fmt::print(stderr, "{}", anchor_gpu_warnings(*anchors, meta.gpu));
  }
  const ops::TopkProblem base = make_problem(a, ctx);
  const Shape largest =
      make_shape(a, base, *std::max_element(a.sizes.begin(), a.sizes.end()), int(a.ks.front()));
  fmt::print(stderr, "winnow bench {} on {} ({}): H={} d={} {}, sizes [{}], k [{}]; ceilings {}\n",
             a.w().name, meta.gpu, base.arch.str(), base.heads, base.head_dim,
             dtype_flag(*a.dtype), fmt::join(a.sizes, ", "), fmt::join(a.ks, ", "),
             ceilings_text(meta.ceilings));

  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  const DeviceInputs dev = make_inputs(base, largest, a.seed);
  const rt::TuningDb db(rt::default_cache_dir());

  std::vector<SizeResult> results;
  bool all_exact = true;
  for (int64_t size : a.sizes) {
    for (SizeResult& r : run_size(a, base, size, dev, ctx, cache, *be, meta.ceilings,
                                  a.tuned ? &db : nullptr)) {
      emit(a.out_path, size_records(a, meta, r));
      all_exact = all_exact && r.check.exact().value_or(true) &&
                  (!r.tuned || r.tuned_check.exact().value_or(true));
      results.push_back(std::move(r));
    }
  }
  print_table(a, meta, results);
  if (!all_exact) fmt::print(stderr, "\nNOT EXACT: see rows_differing / rows_malformed\n");
  return all_exact ? 0 : 1;
}

}  // namespace winnow::tools

int run_bench(int argc, char** argv) { return winnow::tools::bench_main(argc, argv); }
