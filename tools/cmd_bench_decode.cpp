// `winnow bench dsa-decode`: the paged decode indexer top-k (ops/paged/paged_topk.h) as engines
// call it every decode step, on the PERF.md shapes: B requests of one length each, and
// mixed batches (63 x 1K + 1 x 1M by default), against the floor of reading the touched
// cache once (sum of lengths x 132 bytes at the copy bandwidth).
//
// Records per shape: "winnow" (the whole op, eager launches), "materialize" (winnow's
// score-only kernel writing the [B * next_n, max_len] fp32 logits engines materialise;
// that kernel has no paged key source, so its keys are one contiguous set of
// max_len keys shared by every request: it reads less than a paged materialize would, a
// lower bound of that baseline), "materialize+torch.topk" and "torch" (from --baselines,
// bench/torch_baselines.py --decode) and "floor". "winnow-graph" times CUDA-graph replay
// (--graph shapes, B = 1 x 128 keys by default), beside "materialize-graph" and
// "materialize+torch.topk-graph" (torch_baselines.py --decode: topk_graph_ms) where it has more
// than one page. Each shape's block tables are rotated
// over disjoint blocks between runs where the cache holds several copies, so small shapes
// are not served from L2. `exact`: every row's form, and the rows of --check-requests
// requests against the CPU reference (testing/paged_reference.h) on their downloaded pages.
// --hint: each shape again with the hint (PagedInputs::hint) a decode step has, the
// previous call's output on slightly changed queries ("winnow-stream-hint", with its ratio
// to the call without it).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>

#include "compiler/backend/backend.h"
#include "compiler/build_id.h"
#include "ops/paged/paged_stream.h"
#include "ops/paged/paged_topk.h"
#include "runtime/kernel_cache.h"
#include "testing/paged_reference.h"
#include "tools/anchor_ratios.h"
#include "tools/anchor_records.h"
#include "tools/bench_common.h"
#include "tools/commands.h"
#include "tools/random_inputs.h"
#include "paged/paged_cache.cuh"

namespace winnow::tools {
namespace {

using ops::DType;

constexpr const char* kHelp = R"(winnow bench dsa-decode [options]

The paged decode indexer top-k: relu_mh with the cache's key scales, H=64, d=128, q fp8
[B, next_n, 64, 128], the engines' cache uint8 [blocks, 64, 1, 132], block tables and
lengths on the device. Times the fused op ("winnow-stream": the stream path, the default on
sm_90a; "winnow": the gathered path, under WINNOW_PAGED_STREAM=0 or where the stream path
cannot run) against winnow's score-only kernel
writing the [B * next_n, max_len] logits ("materialize", keys shared by the requests: a
lower bound of a paged materialize), the torch baselines of --baselines and the floor of
reading the touched cache once. One JSON record per (shape, impl) on stdout; a table on
stderr. Needs a GPU, except with --compile-only.

Options:
  --B LIST            requests per call, comma-separated [1,8,64,128]
  --len LIST          every request's length, K and M suffixes [4K,64K,1M]
  --mixed LIST        mixed batches, COUNTxLEN joined by '+', comma-separated, or none
                      [63x1K+1x1M]
  --graph LIST        BxLEN shapes timed under CUDA-graph replay, or none [1x128]
  --next-n N          queries per request, 1..4 [1]
  --k N               positions selected per query [2048]
  --check-requests N  requests per shape compared with the CPU reference (the first and
                      the last first) [2]
  --hint              also time each shape with the hint a decode step gives: the
                      previous call's output on the same keys and slightly changed queries
                      (1/16 of q's bytes replaced); records "winnow-stream-hint" (or
                      "winnow-hint", "-graph" under graph replay) with "ratio_to_no_hint",
                      printed beside the call without it; then with a hint of all -1, which
                      bounds no row ("...-hint-none": a request's first step)
  --compile-only      build the kernels the run would time (each shape's op and its
                      materialize baseline, sm_90a, NVRTC) into the kernel cache and
                      stop; no GPU needed
  --repeats N         timed runs [10]        --warmup N     untimed runs [2]
  --seed N            inputs seed [1]        --out FILE     append the records to FILE
  --ceilings FILE     JSON from bench/ceilings.py (copy_tbps): the floor's bandwidth
  --baselines FILE    JSON from bench/torch_baselines.py --decode: materialize+torch.topk
                      and torch records
  --anchors FILE      the engines' records of the same run on the same GPU
                      (../shared/anchors/run.sh: DeepGEMM's paged logits, FlashInfer's
                      top-k, their sum, + torch.topk): each record whose params (B, len,
                      next_n, H, k) equal a --B/--len shape's is printed after the table
                      with the ratio winnow ms / anchor ms (below 1: winnow is faster)
                      and added to the winnow record as "anchors": {IMPL: {"ms", "ratio"}}.
                      Mixed and graph-replay shapes say "no record" (the records are
                      eager launches of equal lengths). A file that cannot be read or a
                      malformed line (FILE:LINE) stops the run (exit 1) before the GPU is
                      touched; see winnow bench --help. Example:
                        bash ../shared/anchors/run.sh .anchors > anchors.jsonl
                        winnow bench dsa-decode --B 64,128 --len 4K,64K --anchors anchors.jsonl
)";

// One decode call's lengths.
struct DecodeShape {
  std::vector<int> lens;
  std::string label;  // "64x65536", "63x1024+1x1048576"
  bool mixed = false;
  bool graph = false;  // timed under graph replay
  int64_t batch() const { return int64_t(lens.size()); }
  int max_len() const { return *std::max_element(lens.begin(), lens.end()); }
  int64_t total_keys() const { return std::accumulate(lens.begin(), lens.end(), int64_t(0)); }
  int64_t pages() const {
    int64_t n = 0;
    for (int l : lens) n += (l + kPageKeys - 1) / kPageKeys;
    return n;
  }
};

struct DecodeArgs {
  std::vector<int64_t> batches = {1, 8, 64, 128}, lens = {4096, 65536, 1048576};
  std::string mixed = "63x1K+1x1M", graph = "1x128";
  int next_n = 1, k = 2048, check_requests = 2, repeats = 10, warmup = 2;
  bool hint = false;  // --hint: each shape also with the previous step's selection
  bool compile_only = false;  // --compile-only: the kernels into the cache, no GPU
  uint64_t seed = 1;
  std::string ceilings_path, baselines_path, out_path;
  std::string anchors_path;  // --anchors: the engines' records (tools/anchor_records.h)
  std::vector<DecodeShape> shapes;
};

// "COUNTxLEN" joined by '+': one shape.
DecodeShape parse_batch(const std::string& flag, const std::string& spec) {
  DecodeShape s;
  for (const std::string& part : split_list(spec, '+')) {
    const auto x = part.find('x');
    if (x == std::string::npos)
      throw UsageError(flag + " expects COUNTxLEN parts joined by '+', got '" + part + "'");
    const int64_t count = parse_size(flag, part.substr(0, x));
    const int64_t len = parse_size(flag, part.substr(x + 1));
    if (len > int64_t(1) << 30) throw UsageError(flag + ": a length above 2^30 in '" + part + "'");
    if (count > (1 << 20)) throw UsageError(flag + ": more than 2^20 requests in '" + spec + "'");
    s.lens.insert(s.lens.end(), size_t(count), int(len));
    s.label += fmt::format("{}{}x{}", s.label.empty() ? "" : "+", count, len);
  }
  if (s.lens.empty()) throw UsageError(flag + " needs COUNTxLEN, got '" + spec + "'");
  return s;
}

std::vector<DecodeShape> parse_batches(const std::string& flag, const std::string& list) {
  std::vector<DecodeShape> out;
  if (list == "none") return out;
  for (const std::string& item : split_list(list)) out.push_back(parse_batch(flag, item));
  if (out.empty()) throw UsageError(flag + " needs at least one shape, or none");
  return out;
}

bool parse_decode_args(int argc, char** argv, DecodeArgs& a) {
  Args args(argc, argv);
  bool named = false;
  for (std::string flag; args.next(flag);) {
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "dsa-decode" && !named) named = true;
    else if (flag == "--B") a.batches = parse_sizes(flag, args.value());
    else if (flag == "--len") a.lens = parse_sizes(flag, args.value());
    else if (flag == "--mixed") a.mixed = args.value();
    else if (flag == "--graph") a.graph = args.value();
    else if (flag == "--next-n") a.next_n = args.int_value();
    else if (flag == "--k") a.k = args.int_value();
    else if (flag == "--check-requests") a.check_requests = args.int_value();
    else if (flag == "--hint") a.hint = true;
    else if (flag == "--compile-only") a.compile_only = true;
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--warmup") a.warmup = args.int_value();
    else if (flag == "--seed") a.seed = uint64_t(args.int_value());
    else if (flag == "--ceilings") a.ceilings_path = args.value();
    else if (flag == "--baselines") a.baselines_path = args.value();
    else if (flag == "--anchors") {
      a.anchors_path = args.value();
      if (a.anchors_path.empty()) throw UsageError("--anchors needs a file name");
    }
    else if (flag == "--out") a.out_path = args.value();
    else unknown_argument(flag);
  }
  if (a.repeats < 1 || a.warmup < 0 || a.check_requests < 0)
    throw UsageError("--repeats >= 1, --warmup >= 0 and --check-requests >= 0");
  if (a.next_n < 1 || a.next_n > ops::kMaxNextN)
    throw UsageError(fmt::format("--next-n {} is outside [1, {}]", a.next_n, ops::kMaxNextN));
  if (a.k < 1 || a.k > ops::kMaxK)
    throw UsageError(fmt::format("--k {} is outside [1, {}]", a.k, ops::kMaxK));
  for (int64_t B : a.batches)
    for (int64_t len : a.lens)
      a.shapes.push_back(parse_batch("--B/--len", fmt::format("{}x{}", B, len)));
  for (DecodeShape& s : parse_batches("--mixed", a.mixed)) {
    s.mixed = true;
    a.shapes.push_back(std::move(s));
  }
  for (DecodeShape& s : parse_batches("--graph", a.graph)) {
    s.graph = true;
    a.shapes.push_back(std::move(s));
  }
  if (a.shapes.empty()) throw UsageError("no shape to run (--B/--len, --mixed, --graph)");
  return true;
}

struct Meta {
  std::string gpu, commit, date, baselines;
  Ceilings ceilings;
};

// The inputs of the largest call, uploaded once: the cache (N(0, 1) fp8 keys, U(0.5, 2)
// scales), q, weights, and max_len contiguous keys with scales for the materialize run.
struct DecodeInputs {
  int64_t num_blocks = 0;
  rt::DeviceBuffer cache, q, w, keys, scales;
};

DecodeInputs make_inputs(const DecodeArgs& a, uint64_t seed) {
  int64_t pages = 0, rows = 0, max_len = 0;
  for (const DecodeShape& s : a.shapes) {
    pages = std::max(pages, s.pages());
    rows = std::max(rows, s.batch() * a.next_n);
    max_len = std::max<int64_t>(max_len, s.max_len());
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  const ops::HostTensor key_codes = sample_table(DType::E4M3, normal, 5 * seed);
  const ops::HostTensor scale_codes = sample_table(DType::F32, scale, 5 * seed + 1);
  DecodeInputs in;
  in.num_blocks = std::max<int64_t>(pages, 1);
  constexpr size_t kBlocksPerJob = 512;
  in.cache = upload_in_slices(
      size_t(in.num_blocks) * kPageBytes, kBlocksPerJob * kPageBytes,
      [&](size_t job, uint8_t* dst, size_t n) {
        uint64_t state = ops::splitmix64(seed * 0x100000001B3ull + job);
        for (size_t b = 0; b < n / kPageBytes; ++b, state = ops::splitmix64(state)) {
          uint8_t* page = dst + b * kPageBytes;
          fill_codes(page, kPageKeyBytes, key_codes, 1, state);
          fill_codes(page + kPageKeyBytes, kPageKeys, scale_codes, 4, ~state);
        }
      });
  in.q = random_device_tensor(DType::E4M3, size_t(rows) * 64 * kPageDim, normal, 5 * seed + 2);
  in.w = random_device_tensor(DType::F32, size_t(rows) * 64,
                              std::uniform_real_distribution<float>(-1.0f, 1.0f), 5 * seed + 3);
  in.keys = random_device_tensor(DType::E4M3, size_t(max_len) * kPageDim, normal, 5 * seed + 4);
  in.scales = random_device_tensor(DType::F32, size_t(max_len), scale, 5 * seed + 5);
  fmt::print(stderr, "inputs: cache of {} blocks ({:.1f} GB), q rows {}, generated and uploaded "
                     "in {:.1f} s\n",
             in.num_blocks, in.cache.size() / 1e9, rows, seconds_since(t0));
  return in;
}

// Block tables for `rotations` disjoint sets of the cache's blocks, each request's blocks
// drawn from a shuffled order of the whole cache: int32 [rotations][B, max_blocks].
std::vector<rt::DeviceBuffer> block_tables(const DecodeShape& s, int64_t num_blocks,
                                           int64_t max_blocks, int rotations, uint64_t seed) {
  std::vector<int> order(static_cast<size_t>(num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  std::vector<rt::DeviceBuffer> out;
  int64_t next = 0;
  for (int r = 0; r < rotations; ++r) {
    std::vector<int> table(size_t(s.batch() * max_blocks), -1);
    for (int64_t b = 0; b < s.batch(); ++b)
      for (int64_t i = 0; i * kPageKeys < s.lens[size_t(b)]; ++i)
        table[size_t(b * max_blocks + i)] = order[size_t(next++ % num_blocks)];
    rt::DeviceBuffer t(table.size() * 4);
    t.upload(table.data(), table.size() * 4);
    out.push_back(std::move(t));
  }
  return out;
}

// Tables rotate until the shape's working set passes 4x the 50 MB L2 (at most 8).
int rotations_for(const DecodeShape& s, int64_t num_blocks) {
  const double bytes = double(s.total_keys()) * kPageBytes / kPageKeys;
  const int64_t fit = std::max<int64_t>(1, num_blocks / std::max<int64_t>(s.pages(), 1));
  return int(std::min<int64_t>({8, fit, int64_t(std::ceil(200e6 / std::max(bytes, 1.0)))}));
}

struct DecodeRun {
  Timing t;
  std::vector<int> indices;  // the first run's, [B * next_n, k]
  uint32_t fallbacks = 0, bad_windows = 0;
  size_t workspace = 0;
};

ops::TensorView on_device(ops::TensorView v, int device) {
  v.device = device;
  return v;
}

// The op's inputs with rotation r's block table.
ops::PagedInputs paged_inputs(const DecodeInputs& in, const DecodeShape& s, int next_n,
                              const rt::DeviceBuffer& table, int64_t max_blocks,
                              const rt::DeviceBuffer& lens, int device) {
  ops::PagedInputs p;
  p.q = on_device(ops::contiguous_view(in.q.data(), DType::E4M3, {s.batch(), next_n, 64, 128}),
                  device);
  p.cache = on_device(ops::contiguous_view(in.cache.data(), DType::U8,
                                           {in.num_blocks, kPageKeys, 1, kPageDim + 4}),
                      device);
  p.block_table =
      on_device(ops::contiguous_view(table.data(), DType::I32, {s.batch(), max_blocks}), device);
  p.context_lens = on_device(ops::contiguous_view(lens.data(), DType::I32, {s.batch()}), device);
  p.weights = on_device(
      ops::contiguous_view(in.w.data(), DType::F32, {s.batch() * next_n, 64}), device);
  return p;
}

// Every row: min(k, visible) distinct positions in [0, visible), then -1.
int64_t malformed_rows(const std::vector<int>& idx, const DecodeShape& s, int next_n, int k) {
  int64_t bad = 0;
  for (int64_t r = 0; r < s.batch() * next_n; ++r) {
    const int len = s.lens[size_t(r / next_n)];
    const int visible = paged_visible_keys(&len, next_n, int(r % next_n), false);
    const int n = std::min(k, visible);
    std::vector<int> row(idx.begin() + r * k, idx.begin() + (r + 1) * k);
    bool ok = std::all_of(row.begin() + n, row.end(), [](int v) { return v == -1; });
    std::sort(row.begin(), row.begin() + n);
    ok = ok && (n == 0 || (row[0] >= 0 && row[size_t(n - 1)] < visible));
    ok = ok && std::adjacent_find(row.begin(), row.begin() + n) == row.begin() + n;
    bad += !ok;
  }
  return bad;
}

// Request b's pages, queries and weights downloaded as a one-request decode call.
ops::PagedHostData download_request(const DecodeInputs& in, const DecodeShape& s, int next_n,
                                    const std::vector<int>& table, int64_t max_blocks, int64_t b) {
  ops::PagedHostData d;
  const int len = s.lens[size_t(b)];
  const int pages = (len + kPageKeys - 1) / kPageKeys;
  d.batch = 1, d.next_n = next_n, d.heads = 64, d.max_blocks = std::max(pages, 1);
  d.num_blocks = pages;
  d.cache.resize(size_t(pages) * kPageBytes);
  for (int i = 0; i < pages; ++i)
    rt::check(rt::driver().cuMemcpyDtoH(&d.cache[size_t(i) * kPageBytes],
                                        in.cache.ptr() + size_t(table[size_t(b * max_blocks + i)]) *
                                                             kPageBytes,
                                        kPageBytes),
              "cuMemcpyDtoH (page)");
  d.block_table.resize(size_t(d.max_blocks));
  std::iota(d.block_table.begin(), d.block_table.end(), 0);
  d.context_lens = {len};
  d.q.resize(size_t(next_n) * 64 * kPageDim);
  rt::check(rt::driver().cuMemcpyDtoH(d.q.data(), in.q.ptr() + size_t(b) * d.q.size(), d.q.size()),
            "cuMemcpyDtoH (q)");
  d.w.resize(size_t(next_n) * 64);
  rt::check(rt::driver().cuMemcpyDtoH(d.w.data(), in.w.ptr() + size_t(b) * d.w.size() * 4,
                                      d.w.size() * 4),
            "cuMemcpyDtoH (weights)");
  return d;
}

// The requests checked: the first and the last, then evenly between.
std::vector<int64_t> checked_requests(int64_t B, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n && i < B; ++i)
    out.push_back(i == 0 ? 0 : i == 1 ? B - 1 : int64_t(i) * B / n);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct CheckResult {
  int64_t rows_checked = 0, rows_differing = 0, rows_malformed = 0;
  std::optional<bool> exact() const {
    if (rows_malformed > 0 || rows_differing > 0) return false;
    return rows_checked > 0 ? std::optional<bool>(true) : std::nullopt;
  }
};

CheckResult check_rows(const DecodeArgs& a, const ops::PagedProblem& p, const DecodeInputs& in,
                       const DecodeShape& s, const std::vector<int>& table, int64_t max_blocks,
                       const std::vector<int>& indices) {
  CheckResult c;
  c.rows_malformed = malformed_rows(indices, s, a.next_n, a.k);
  for (int64_t b : checked_requests(s.batch(), a.check_requests)) {
    const ops::PagedHostData d = download_request(in, s, a.next_n, table, max_blocks, b);
    ops::PagedProblem one = p;
    one.max_batch = 1;
    one.max_blocks_per_seq = d.max_blocks;
    one.max_total_keys = 0;
    const ops::GatheredDecode g = ops::gather_decode(one, d);
    std::vector<char> differs(size_t(a.next_n));
    ops::parallel_for(size_t(a.next_n), [&](size_t j) {
      differs[j] = !ops::paged_row_matches(one, g, int64_t(j),
                                           &indices[size_t((b * a.next_n + int64_t(j)) * a.k)]);
    });
    for (char bad : differs) c.rows_differing += bad, ++c.rows_checked;
  }
  return c;
}

ops::PagedProblem problem_for(const DecodeArgs& a, const DecodeShape& s, backend::Arch arch) {
  ops::PagedProblem p;
  p.heads = 64;
  p.k = a.k;
  p.next_n = a.next_n;
  p.max_batch = int(s.batch());
  p.max_blocks_per_seq = (s.max_len() + kPageKeys - 1) / kPageKeys;
  // The keys one call holds together: an engine's token budget, not B x the longest.
  p.max_total_keys = s.total_keys();
  p.arch = arch;
  return p;
}
ops::PagedProblem problem_for(const DecodeArgs& a, const DecodeShape& s, const rt::Context& ctx) {
  return problem_for(a, s, ops::device_arch(ctx));
}

// Whether the shape is timed beside the score-only baseline: the tiny graph shapes (one
// page: 1 x 128, whose goal is an absolute time) are not.
bool has_materialize_baseline(const DecodeShape& s) { return !(s.graph && s.max_len() <= kPageKeys); }

// The score-only baseline's problem: the shape's keys contiguous and shared by the requests.
ops::TopkProblem materialize_problem(const DecodeArgs& a, const DecodeShape& s, backend::Arch arch) {
  ops::TopkProblem p = ops::paged_topk_problem(problem_for(a, s, arch));
  p.mode = ops::Mode::Materialize;
  p.window = ops::WindowKind::Dense;
  return p;
}

DecodeRun run_winnow(const DecodeArgs& a, const ops::PagedTopkOp& op, const DecodeInputs& in,
                     const DecodeShape& s, const std::vector<rt::DeviceBuffer>& tables,
                     int64_t max_blocks, const rt::DeviceBuffer& lens, int device,
                     rt::DeviceBuffer& ws, CUstream capture_stream,
                     const std::vector<rt::DeviceBuffer>* hints = nullptr) {
  const int64_t rows = s.batch() * a.next_n;
  rt::DeviceBuffer idx(size_t(rows) * a.k * 4);
  const ops::TensorView out = on_device(ops::contiguous_view(idx.data(), DType::I32, {rows, a.k}),
                                        device);
  std::vector<ops::PagedInputs> inputs;
  for (size_t i = 0; i < tables.size(); ++i) {
    inputs.push_back(paged_inputs(in, s, a.next_n, tables[i], max_blocks, lens, device));
    if (hints)
      inputs.back().hint =
          on_device(ops::contiguous_view((*hints)[i].data(), DType::I32, {rows, a.k}), device);
  }
  DecodeRun r;
  r.workspace = op.workspace_bytes();
  op.execute(inputs[0], out, ws.data(), ws.size(), nullptr);
  r.indices.resize(size_t(rows) * a.k);
  idx.download(r.indices.data(), r.indices.size() * 4);
  size_t next = 0;
  const rt::DriverApi& cu = rt::driver();
  if (!s.graph) {
    r.t = time_launches(
        [&](CUstream st) {
          op.execute(inputs[next++ % inputs.size()], out, ws.data(), ws.size(), st);
        },
        a.warmup, a.repeats, std::string(hints ? "dsa-decode hint " : "dsa-decode ") + s.label);
  } else {  // captured once on a stream of its own, replayed on the timing stream
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    rt::check(cu.cuStreamBeginCapture(capture_stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
    op.execute(inputs[0], out, ws.data(), ws.size(), capture_stream);
    rt::check(cu.cuStreamEndCapture(capture_stream, &graph), "end capture");
    rt::check(cu.cuGraphInstantiate(&exec, graph, 0), "graph instantiate");
    r.t = time_launches([&](CUstream st) { rt::check(cu.cuGraphLaunch(exec, st), "graph launch"); },
                        a.warmup, a.repeats,
                        std::string(hints ? "dsa-decode hint graph " : "dsa-decode graph ") + s.label);
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
  }
  uint32_t counters[2];
  rt::check(cu.cuMemcpyDtoH(counters, ws.ptr() + op.counter_offset(), sizeof counters),
            "cuMemcpyDtoH (counters)");
  r.fallbacks = counters[0];
  r.bad_windows = counters[1];
  return r;
}

// The hints of a decode step, one for each block table rotation: the op's output on the same
// keys (that rotation's) for the previous step's queries, q with 1/16 of its bytes replaced
// by other bytes of q.
std::vector<rt::DeviceBuffer> make_hints(const DecodeArgs& a, const ops::PagedTopkOp& op,
                                         const DecodeInputs& in, const DecodeShape& s,
                                         const std::vector<rt::DeviceBuffer>& tables,
                                         int64_t max_blocks, const rt::DeviceBuffer& lens,
                                         int device, rt::DeviceBuffer& ws) {
  const int64_t rows = s.batch() * a.next_n;
  std::vector<uint8_t> q(size_t(rows) * 64 * kPageDim);
  rt::check(rt::driver().cuMemcpyDtoH(q.data(), in.q.ptr(), q.size()), "cuMemcpyDtoH (q)");
  std::mt19937_64 rng(a.seed * 7 + uint64_t(s.batch()));
  std::uniform_int_distribution<size_t> any(0, q.size() - 1);
  for (size_t i = 0; i < q.size() / 16; ++i) q[any(rng)] = q[any(rng)];
  rt::DeviceBuffer previous_q(q.size());
  previous_q.upload(q.data(), q.size());
  std::vector<rt::DeviceBuffer> hints;
  for (const rt::DeviceBuffer& t : tables) {
    ops::PagedInputs p = paged_inputs(in, s, a.next_n, t, max_blocks, lens, device);
    p.q.data = previous_q.data();
    rt::DeviceBuffer& h = hints.emplace_back(size_t(rows) * a.k * 4);
    op.execute(p, on_device(ops::contiguous_view(h.data(), DType::I32, {rows, a.k}), device),
               ws.data(), ws.size(), nullptr);
  }
  rt::check(rt::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  return hints;
}

// The score-only kernel over max_len contiguous keys shared by the requests, writing the
// [B * next_n, max_len] logits; nullopt when they do not fit the device.
std::optional<Timing> run_materialize(const DecodeArgs& a, const DecodeInputs& in,
                                      const DecodeShape& s, const rt::Context& ctx,
                                      rt::CubinCache& cache, const backend::Backend& be,
                                      CUstream capture_stream) {
  const int64_t rows = s.batch() * a.next_n, T = s.max_len();
  const size_t matrix = size_t(rows) * size_t(T) * 4;
  size_t free = 0, total = 0;
  rt::check(rt::driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  if (matrix + (size_t(1) << 30) > free) return std::nullopt;
  auto op = ops::TopkOp::create(materialize_problem(a, s, ops::device_arch(ctx)), &ctx);
  op->build(cache, be);
  const int device = ctx.info().ordinal;
  ops::TopkInputs t;
  t.q = on_device(ops::contiguous_view(in.q.data(), DType::E4M3, {rows, 64, 128}), device);
  t.k = on_device(ops::contiguous_view(in.keys.data(), DType::E4M3, {T, 128}), device);
  t.key_scale = on_device(ops::contiguous_view(in.scales.data(), DType::F32, {T}), device);
  t.weights = on_device(ops::contiguous_view(in.w.data(), DType::F32, {rows, 64}), device);
  rt::DeviceBuffer scores(matrix), ws(std::max<size_t>(op->workspace_bytes(), 256));
  const ops::TensorView out =
      on_device(ops::contiguous_view(scores.data(), DType::F32, {rows, T}), device);
  if (!s.graph) {
    return time_launches(
        [&](CUstream st) { op->execute(t, nullptr, &out, ws.data(), ws.size(), st); }, a.warmup,
        a.repeats, "materialize " + s.label);
  }
  // Under graph replay as winnow's own call is (an engine captures its decode step).
  const rt::DriverApi& cu = rt::driver();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  rt::check(cu.cuStreamBeginCapture(capture_stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
  op->execute(t, nullptr, &out, ws.data(), ws.size(), capture_stream);
  rt::check(cu.cuStreamEndCapture(capture_stream, &graph), "end capture");
  rt::check(cu.cuGraphInstantiate(&exec, graph, 0), "graph instantiate");
  const Timing timing =
      time_launches([&](CUstream st) { rt::check(cu.cuGraphLaunch(exec, st), "graph launch"); },
                    a.warmup, a.repeats, "materialize graph " + s.label);
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
  return timing;
}

std::string params_json(const DecodeArgs& a, const DecodeShape& s) {
  return fmt::format("{{\"B\": {}, \"len\": {}, \"next_n\": {}, \"k\": {}, \"H\": 64, \"d\": 128, "
                     "\"lens\": \"{}\", \"mixed\": {}, \"graph\": {}}}",
                     s.batch(), s.max_len(), a.next_n, a.k, s.label, s.mixed, s.graph);
}

std::string record(const DecodeArgs& a, const Meta& m, const DecodeShape& s, const char* impl,
                   const Timing& t, double floor_ms, double bytes, size_t extra,
                   const std::string& fields) {
  return fmt::format(
      "{{\"workload\": \"dsa-decode\", \"impl\": \"{}\", \"params\": {}, \"ms_median\": {:.4f}, "
      "\"ms_min\": {:.4f}, \"ms_max\": {:.4f}, \"tflops\": {:.2f}, \"gbps\": {:.2f}, "
      "\"floor_ms\": {:.4f}, \"ratio_to_floor\": {:.4f}, \"extra_mem_bytes\": {}{}, "
      "\"repeats\": {}, \"warmup\": {}, \"gpu\": {}, \"commit\": \"{}\", \"date\": \"{}\"}}",
      impl, params_json(a, s), t.median, t.min, t.max,
      2.0 * double(s.total_keys()) * a.next_n * 64 * 128 / t.median / 1e9, bytes / t.median / 1e6,
      floor_ms, t.median / floor_ms, extra, fields, a.repeats, a.warmup, json_string(m.gpu),
      m.commit, m.date);
}

// The params the engines' decode records give this shape; nullopt for mixed batches and
// graph replay (the records time eager launches of requests of one length).
std::optional<AnchorParams> anchor_params(const DecodeArgs& a, const DecodeShape& s) {
  if (s.mixed || s.graph) return std::nullopt;
  return AnchorParams{{"B", double(s.batch())}, {"len", double(s.max_len())},
                      {"next_n", double(a.next_n)}, {"H", 64.0}, {"k", double(a.k)}};
}

// --baselines' value of `key`, if any.
std::optional<double> baseline(const Meta& m, const std::string& key) {
  return m.baselines.empty() ? std::nullopt : json_number(m.baselines, key);
}

struct Row {
  std::string label, impl;
  double ms, ratio_to_floor;
  std::optional<bool> exact;
};

// --compile-only: every shape's op and its materialize baseline for sm_90a into the kernel
// cache, with no device: the same problems, so the same keys a GPU run of the same
// arguments looks up.
int decode_compile_only(const DecodeArgs& a) {
  const backend::Arch arch = backend::parse_arch("sm_90a");
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  fmt::print(stderr, "winnow bench dsa-decode --compile-only: {} {} into {}\n", be->name(),
             be->version(), rt::default_cache_dir().string());
  for (const DecodeShape& s : a.shapes) {
    const auto t0 = std::chrono::steady_clock::now();
    auto op = ops::PagedTopkOp::create(problem_for(a, s, arch), nullptr);
    op->build(cache, *be);
    if (has_materialize_baseline(s)) {
      auto mat = ops::TopkOp::create(materialize_problem(a, s, arch), nullptr);
      mat->build(cache, *be);
    }
    fmt::print(stderr, "  {}{}: {} path ({:.1f} s)\n", s.graph ? "graph " : "", s.label,
               op->stream() ? "stream" : "gather", seconds_since(t0));
  }
  return 0;
}

int bench_decode_main(int argc, char** argv) {
  DecodeArgs a;
  if (!parse_decode_args(argc, argv, a)) {
    fmt::print("{}", kHelp);
    return 0;
  }
  // The records are read and checked before the GPU is touched.
  std::optional<AnchorFile> anchors;
  if (!a.anchors_path.empty()) {
    anchors = read_anchor_records(a.anchors_path);
    fmt::print(stderr, "{}", anchor_file_summary(*anchors));
  }
  if (a.compile_only) return decode_compile_only(a);
  if (!bench_gpu_present()) return 1;
  rt::Context ctx(0);
  Meta meta{ctx.info().name, winnow::build_id(), utc_date(), "", read_ceilings(a.ceilings_path, ctx.info().name)};
  if (anchors) fmt::print(stderr, "{}", anchor_gpu_warnings(*anchors, meta.gpu));
  std::vector<AnchorRow> anchor_rows;
  if (!a.baselines_path.empty())
    meta.baselines = read_text(a.baselines_path, "baselines", "no torch records").value_or("");
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  const DecodeInputs in = make_inputs(a, a.seed);
  const int device = ctx.info().ordinal;
  CUstream capture_stream = nullptr;
  rt::check(rt::driver().cuStreamCreate(&capture_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  std::vector<Row> table;
  bool all_exact = true;
  for (const DecodeShape& s : a.shapes) {
    const auto t0 = std::chrono::steady_clock::now();
    const ops::PagedProblem p = problem_for(a, s, ctx);
    auto op = ops::PagedTopkOp::create(p, &ctx);
    op->build(cache, *be);
    const int64_t max_blocks = p.max_blocks_per_seq;
    const int rotations = s.graph ? 1 : rotations_for(s, in.num_blocks);
    const std::vector<rt::DeviceBuffer> tables =
        block_tables(s, in.num_blocks, max_blocks, rotations, a.seed * 31 + uint64_t(s.batch()));
    rt::DeviceBuffer lens(s.lens.size() * 4);
    lens.upload(s.lens.data(), s.lens.size() * 4);
    const size_t free_before = free_device_memory();
    rt::DeviceBuffer ws(std::max<size_t>(op->workspace_bytes(), 256));
    const size_t extra = std::max(ws.size(), free_before - std::min(free_before,
                                                                     free_device_memory()));
    fmt::print(stderr, "{}: built in {:.1f} s, workspace {:.1f} MB, {} block table rotations\n",
               s.label, seconds_since(t0), ws.size() / 1e6, rotations);
    const DecodeRun r = run_winnow(a, *op, in, s, tables, max_blocks, lens, device, ws,
                                   capture_stream);
    std::vector<int> first_table(size_t(s.batch() * max_blocks));
    tables[0].download(first_table.data(), first_table.size() * 4);
    const CheckResult c = check_rows(a, p, in, s, first_table, max_blocks, r.indices);
    all_exact = all_exact && c.exact().value_or(true);

    const double bytes = double(s.total_keys()) * (kPageDim + 4);
    const double floor_ms = bytes / (meta.ceilings.copy_tbps * 1e9);
    std::vector<std::string> lines;
    std::string fields = fmt::format(
        ", \"exact\": {}, \"fallbacks\": {}, \"bad_windows\": {}, \"checked_rows\": {}, "
        "\"rows_differing\": {}, \"rows_malformed\": {}, \"workspace_bytes\": {}, "
        "\"rotations\": {}, \"outputs\": \"indices\"",
        json_bool(c.exact()), r.fallbacks, r.bad_windows, c.rows_checked, c.rows_differing,
        c.rows_malformed, r.workspace, rotations);
    if (s.graph) fields += ", \"goal_ms\": 0.012";
    // The path (its own impl names) and its launches; the variable that chose the gathered
    // path where the stream path could run.
    fields += fmt::format(", \"path\": \"{}\", \"launch\": {}", op->stream() ? "stream" : "gather",
                          json_string(op->launch_info()));
    if (!op->stream() && ops::paged_stream_unsuited(op->problem()).empty())
      fields += ", \"variant\": \"WINNOW_PAGED_STREAM=0\"";
    std::optional<Timing> mat;
    // Under graph replay (s.graph) the baselines are too: the materialize kernel captured,
    // torch.topk from bench/torch_baselines.py's graph-replayed "topk_graph_ms" records.
    if (has_materialize_baseline(s)) mat = run_materialize(a, in, s, ctx, cache, *be, capture_stream);
    const int64_t rows = s.batch() * a.next_n;
    const std::string topk_key =
        fmt::format("{}:{}x{}x{}", s.graph ? "topk_graph_ms" : "topk_ms", rows, s.max_len(), a.k);
    const std::string torch_key = fmt::format("decode_torch_ms:{}:{}:{}", s.label, a.next_n, a.k);
    const std::optional<double> topk_ms = baseline(meta, topk_key), torch_ms = baseline(meta, torch_key);
    if (mat) fields += fmt::format(", \"ratio_to_materialize\": {:.4f}", r.t.median / mat->median);
    if (mat && topk_ms)
      fields += fmt::format(", \"ratio_to_materialize_topk\": {:.4f}",
                            r.t.median / (mat->median + *topk_ms));
    if (torch_ms) fields += fmt::format(", \"ratio_to_torch\": {:.4f}", r.t.median / *torch_ms);
    const char* impl = op->stream() ? (s.graph ? "winnow-stream-graph" : "winnow-stream")
                                    : (s.graph ? "winnow-graph" : "winnow");
    if (anchors) {
      AnchorRow& row = anchor_rows.emplace_back();
      row.workload = "dsa-decode";
      row.size = s.label;
      row.impl = impl;
      row.winnow_ms = r.t.median;
      if (const std::optional<AnchorParams> params = anchor_params(a, s))
        row.ratios = anchor_ratios(*anchors, "dsa-decode", *params, r.t.median);
      else
        row.why_none = s.mixed ? "no record (mixed batch)" : "no record (graph replay)";
      fields += anchor_fields(a.anchors_path, row.ratios);
    }
    lines.push_back(record(a, meta, s, impl, r.t, floor_ms, bytes, extra, fields));
    table.push_back({s.label, impl, r.t.median, r.t.median / floor_ms, c.exact()});
    if (a.hint) {
      // One hinted run: its record (impl + suffix), its table row and a line on stderr.
      auto time_hinted = [&](const std::vector<rt::DeviceBuffer>& hints, const char* suffix,
                             const char* what) {
        const DecodeRun h = run_winnow(a, *op, in, s, tables, max_blocks, lens, device, ws,
                                       capture_stream, &hints);
        const CheckResult hc = check_rows(a, p, in, s, first_table, max_blocks, h.indices);
        all_exact = all_exact && hc.exact().value_or(true);
        const std::string impl_name = std::string(op->stream() ? "winnow-stream" : "winnow") +
                                      suffix + (s.graph ? "-graph" : "");
        lines.push_back(record(
            a, meta, s, impl_name.c_str(), h.t, floor_ms, bytes, extra,
            fmt::format(", \"exact\": {}, \"fallbacks\": {}, \"bad_windows\": {}, "
                        "\"checked_rows\": {}, \"rows_differing\": {}, \"rows_malformed\": {}, "
                        "\"workspace_bytes\": {}, \"rotations\": {}, \"outputs\": \"indices\", "
                        "\"hint\": \"{}\", \"no_hint_ms\": {:.4f}, \"ratio_to_no_hint\": {:.4f}, "
                        "\"path\": \"{}\"",
                        json_bool(hc.exact()), h.fallbacks, h.bad_windows, hc.rows_checked,
                        hc.rows_differing, hc.rows_malformed, h.workspace, rotations, what,
                        r.t.median, h.t.median / r.t.median, op->stream() ? "stream" : "gather")));
        table.push_back({s.label, impl_name, h.t.median, h.t.median / floor_ms, hc.exact()});
        fmt::print(stderr, "{}: with the hint ({}) {:.4f} ms, without {:.4f} ms: ratio {:.3f}, {} "
                           "fallback rows\n",
                   s.label, what, h.t.median, r.t.median, h.t.median / r.t.median, h.fallbacks);
      };
      const std::vector<rt::DeviceBuffer> hints =
          make_hints(a, *op, in, s, tables, max_blocks, lens, device, ws);
      time_hinted(hints, "-hint", "the previous call on 1/16 of q changed");
      // A hint that bounds no row (all -1: a request's first step, a slot that changed
      // requests): every row filters from the lowest threshold.
      std::vector<rt::DeviceBuffer> none;
      const std::vector<int32_t> minus_one(size_t(rows) * size_t(a.k), -1);
      for (size_t i = 0; i < hints.size(); ++i) {
        none.emplace_back(minus_one.size() * 4).upload(minus_one.data(), minus_one.size() * 4);
      }
      time_hinted(none, "-hint-none", "all -1 (no row bounded)");
    }
    const size_t logits = size_t(rows) * size_t(s.max_len()) * 4;
    const std::string shared =
        ", \"exact\": null, \"fallbacks\": 0, \"keys\": \"shared: max_len contiguous keys read "
        "by every request (no paged materialize in winnow: a lower bound of one)\"";
    const char* mat_impl = s.graph ? "materialize-graph" : "materialize";
    const char* both_impl = s.graph ? "materialize+torch.topk-graph" : "materialize+torch.topk";
    if (mat) {
      lines.push_back(record(a, meta, s, mat_impl, *mat, floor_ms, bytes + double(logits),
                             logits, shared));
      table.push_back({s.label, mat_impl, mat->median, mat->median / floor_ms, std::nullopt});
    }
    if (mat && topk_ms) {
      const float ms = float(*topk_ms);
      const Timing both{mat->median + ms, mat->min + ms, mat->max + ms};
      lines.push_back(record(a, meta, s, both_impl, both, floor_ms,
                             bytes + double(logits), logits,
                             shared + fmt::format(", \"includes_topk\": true, \"torch_ms\": {:.4f}, "
                                                  "\"baselines\": {}",
                                                  *topk_ms, json_string(a.baselines_path))));
      table.push_back({s.label, both_impl, both.median, both.median / floor_ms, std::nullopt});
    }
    if (torch_ms) {
      const float ms = float(*torch_ms);
      lines.push_back(record(a, meta, s, "torch", Timing{ms, ms, ms}, floor_ms, bytes, 0,
                             fmt::format(", \"exact\": null, \"fallbacks\": 0, \"baselines\": {}",
                                         json_string(a.baselines_path))));
      table.push_back({s.label, "torch", ms, ms / floor_ms, std::nullopt});
    }
    const float f = float(floor_ms);
    lines.push_back(record(a, meta, s, "floor", Timing{f, f, f}, floor_ms, bytes, 0,
                           fmt::format(", \"exact\": null, \"fallbacks\": 0, \"copy_tbps\": {}, "
                                       "\"ceilings\": \"{}\", \"floor_bytes\": {:.0f}",
                                       meta.ceilings.copy_tbps, meta.ceilings.source(), bytes)));
    emit(a.out_path, lines);
    fmt::print(stderr, "{}: winnow {:.4f} ms ({:.2f}x the floor), check of {} rows: {} differing, "
                       "{} malformed\n",
               s.label, r.t.median, r.t.median / floor_ms, c.rows_checked, c.rows_differing,
               c.rows_malformed);
  }
  rt::driver().cuStreamDestroy(capture_stream);
  fmt::print(stderr, "\n{:<22} {:<24} {:>10} {:>9} {:>6}\n", "lens", "impl", "ms", "/floor",
             "exact");
  for (const Row& r : table)
    fmt::print(stderr, "{:<22} {:<24} {:>10.4f} {:>9.3f} {:>6}\n", r.label, r.impl, r.ms,
               r.ratio_to_floor, r.impl.rfind("winnow", 0) == 0 ? json_bool(r.exact) : "-");
  if (anchors)
    fmt::print(stderr, "{}{}", anchor_table(a.anchors_path, anchor_rows),
               unmatched_records(*anchors, anchor_rows));
  if (!all_exact) fmt::print(stderr, "\nNOT EXACT: see rows_differing / rows_malformed\n");
  return all_exact ? 0 : 1;
}

}  // namespace
}  // namespace winnow::tools

int run_bench_decode(int argc, char** argv) { return winnow::tools::bench_decode_main(argc, argv); }
