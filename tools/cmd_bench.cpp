// `winnow bench`: the PERF.md workloads, timed on the GPU, one JSON record per
// (workload, size, impl) on stdout (and appended to --out), a human table on stderr.
//
// Impls: "winnow" (the fused score + exact top-k), "materialize" (winnow's score-only
// kernel writing the fp32 [Q, T] matrix: the logits-only baseline, no top-k on it) and
// "floor" (the FLOP floor at the measured or published ceiling).
//
// The score matrix at T = 1M is 32 GiB: it lives on the device only. The exactness check
// downloads --check-rows rows of it (spread over the queries, first and last included)
// and compares them with the fused index sets; every fused row is checked for form
// (in range, distinct, no padding when the window holds k keys).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "ops/harness.h"
#include "ops/reference.h"
#include "compiler/build_id.h"
#include "ops/topk.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "tools/commands.h"

namespace winnow::tools {
namespace {

// ---------------------------------------------------------------------------------------
// Workloads and arguments

struct Workload {
  const char* name;
  int heads;
  bool causal;  // query i of the chunk sees keys [0, T - Q + i + 1)
  const char* what;
};

constexpr Workload kWorkloads[] = {
    {"dsa-prefill", 64, false, "relu_mh H=64 d=128, every query sees all T keys"},
    {"dsa-prefill-causal", 64, true, "as dsa-prefill, query i sees keys [0, T - Q + i + 1)"},
    {"dsa-glm", 32, false, "relu_mh H=32 d=128, every query sees all T keys"},
};
constexpr int kHeadDim = 128;

std::string workload_list() {
  std::string s;
  for (const Workload& w : kWorkloads) s += (s.empty() ? "" : ", ") + std::string(w.name);
  return s;
}

struct BenchArgs {
  const Workload* workload = nullptr;
  std::vector<int64_t> sizes = {65536, 262144, 1048576};
  int64_t queries = 8192;
  int k = 2048;
  ops::DType dtype = ops::DType::E4M3;  // q and k (bf16 q needs bf16 k for tensor cores)
  int repeats = 10, warmup = 2, check_rows = 64;
  uint64_t seed = 1;
  std::string ceilings_path, out_path;
};

const char* dtype_flag(ops::DType t) { return t == ops::DType::BF16 ? "bf16" : "fp8"; }

constexpr const char* kHelp = R"(winnow bench <workload> [options]

Times the fused score + exact top-k ("winnow") against the score-only kernel writing the
fp32 score matrix ("materialize", no top-k on it) and the FLOP floor ("floor"), on random
inputs. One JSON record per (workload, size, impl) on stdout; a summary table on stderr.

Workloads:
  dsa-prefill          relu_mh with per-key scale, H=64, d=128, every query sees all T keys
  dsa-prefill-causal   as dsa-prefill, query i sees keys [0, T - Q + i + 1) (needs T >= Q)
  dsa-glm              as dsa-prefill with H=32

Options:
  --T LIST            key counts, comma-separated (K and M suffixes: 64K = 65536)
                      [65536,262144,1048576]
  --Q N               queries [8192]
  --k N               keys selected per query [2048]
  --q-dtype fp8|bf16  q and k type (fp8 e4m3 with per-key scale, or bf16) [fp8]
  --repeats N         timed runs, median/min/max reported [10]
  --warmup N          untimed runs before them [2]
  --check-rows N      materialized rows downloaded and compared with the fused result [64]
  --seed N            random inputs seed [1]
  --ceilings FILE     JSON from bench/ceilings.py (copy_tbps, bf16_tflops, fp8_tflops);
                      PERF.md's published values when absent
  --out FILE          append the JSON records to FILE too
)";

// "65536", "64K", "1M" (binary multiples).
int64_t parse_size(const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc{} && p != end && p + 1 == end) {
    if (*p == 'K' || *p == 'k') v <<= 10, p = end;
    else if (*p == 'M' || *p == 'm') v <<= 20, p = end;
  }
  if (ec != std::errc{} || p != end || v <= 0)
    throw UsageError("--T expects positive integers separated by commas, got '" + s + "'");
  return v;
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(parse_size(item));
  if (out.empty()) throw UsageError("--T needs at least one size");
  return out;
}

const Workload& find_workload(const std::string& name) {
  for (const Workload& w : kWorkloads)
    if (name == w.name) return w;
  throw UsageError("unknown workload '" + name + "'; the workloads are " + workload_list());
}

// Returns false when --help was asked for.
bool parse_args(int argc, char** argv, BenchArgs& a) {
  Args args(argc, argv);
  for (std::string flag; args.next(flag);) {
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "--T") a.sizes = parse_sizes(args.value());
    else if (flag == "--Q") a.queries = args.int_value();
    else if (flag == "--k") a.k = args.int_value();
    else if (flag == "--q-dtype") {
      const std::string v = args.value();
      if (v == "fp8" || v == "e4m3") a.dtype = ops::DType::E4M3;
      else if (v == "bf16") a.dtype = ops::DType::BF16;
      else throw UsageError("--q-dtype expects fp8 or bf16, got '" + v + "'");
    } else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--warmup") a.warmup = args.int_value();
    else if (flag == "--check-rows") a.check_rows = args.int_value();
    else if (flag == "--seed") a.seed = uint64_t(args.int_value());
    else if (flag == "--ceilings") a.ceilings_path = args.value();
    else if (flag == "--out") a.out_path = args.value();
    else if (!flag.empty() && flag[0] != '-' && !a.workload) a.workload = &find_workload(flag);
    else unknown_argument(flag);
  }
  if (!a.workload) throw UsageError("which workload? one of " + workload_list());
  if (a.queries <= 0) throw UsageError("--Q must be positive");
  if (a.repeats < 1) throw UsageError("--repeats must be at least 1");
  if (a.warmup < 0 || a.check_rows < 0) throw UsageError("--warmup and --check-rows must be >= 0");
  if (a.workload->causal) {
    for (int64_t t : a.sizes)
      if (t < a.queries)
        throw UsageError(fmt::format("{}: T = {} is below Q = {} (the chunk is the last Q "
                                     "positions of T)", a.workload->name, t, a.queries));
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Ceilings and the floor

struct Ceilings {
  // PERF.md's values on this H200 (torch 2.11, CUDA 13.0).
  double copy_tbps = 4.23, bf16_tflops = 749, fp8_tflops = 1408;
  int measured = 0;  // how many of the three came from the file
  const char* source() const {
    return measured == 3 ? "measured" : measured == 0 ? "published" : "mixed";
  }
};

// The number after "key": in a flat JSON object; nullopt when missing or null. A scan,
// not a parser: the file is the one bench/ceilings.py writes.
std::optional<double> json_number(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return std::nullopt;
  at = text.find(':', at);
  if (at == std::string::npos) return std::nullopt;
  const char* p = text.c_str() + at + 1;
  char* end = nullptr;
  const double v = std::strtod(p, &end);  // skips spaces; "null" parses as nothing
  if (end == p || !(v > 0)) return std::nullopt;
  return v;
}

Ceilings read_ceilings(const std::string& path) {
  Ceilings c;
  if (path.empty()) return c;
  std::ifstream in(path);
  if (!in) {
    fmt::print(stderr, "ceilings: cannot read {}: using PERF.md's published values\n", path);
    return c;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto take = [&](const char* key, double& slot) {
    if (auto v = json_number(text, key)) slot = *v, ++c.measured;
    else fmt::print(stderr, "ceilings: no {} in {}: using the published {}\n", key, path, slot);
  };
  take("copy_tbps", c.copy_tbps);
  take("bf16_tflops", c.bf16_tflops);
  take("fp8_tflops", c.fp8_tflops);
  return c;
}

// One (workload, T) problem's sizes, for FLOP and byte counts.
struct Shape {
  int64_t Q, T;
  int H, d, k;
  int elem_bytes;
  bool causal;
  // Query i sees T - Q + i + 1 keys when causal: Q (T - Q) + Q (Q + 1) / 2 pairs.
  double visible_pairs() const {
    return causal ? double(Q) * double(T - Q) + double(Q) * double(Q + 1) / 2 : double(Q) * T;
  }
  double flop() const { return 2.0 * visible_pairs() * H * d; }
  // q, k, per-key scale and weights read once.
  double input_bytes() const {
    return double(Q) * H * d * elem_bytes + double(T) * d * elem_bytes + double(T) * 4 +
           double(Q) * H * 4;
  }
  double winnow_bytes() const { return input_bytes() + double(Q) * k * 4; }
  double materialize_bytes() const { return input_bytes() + visible_pairs() * 4; }
};

// ---------------------------------------------------------------------------------------
// Device side

ops::TensorView view(const rt::DeviceBuffer& b, ops::DType t, std::initializer_list<int64_t> shape) {
  return ops::contiguous_view(b.data(), t, shape);
}

template <class T>
rt::DeviceBuffer upload(const std::vector<T>& v) {
  rt::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// The inputs of the largest T, uploaded once; smaller sizes use the first T keys.
struct DeviceInputs {
  rt::DeviceBuffer q, k, w, kscale;
  int64_t queries = 0;
  ops::TopkInputs for_size(const ops::TopkProblem& p, int64_t T) const {
    ops::TopkInputs in;
    in.q = view(q, p.q_dtype, {queries, p.heads, p.head_dim});
    in.k = view(k, p.k_dtype, {T, p.head_dim});
    in.weights = view(w, ops::DType::F32, {queries, p.heads});
    in.key_scale = view(kscale, ops::DType::F32, {T});
    return in;
  }
};

struct Timing {
  float median = 0, min = 0, max = 0;
};

class Event {
 public:
  Event() { rt::check(rt::driver().cuEventCreate(&e_, 0), "cuEventCreate"); }
  ~Event() { rt::driver().cuEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return e_; }
 private:
  CUevent e_ = nullptr;
};

// `warmup` untimed launches, then `repeats` launches each between two CUDA events.
template <class Launch>
Timing time_launches(const Launch& launch, int warmup, int repeats) {
  const rt::DriverApi& cu = rt::driver();
  CUstream stream = nullptr;
  for (int i = 0; i < warmup; ++i) launch(stream);
  rt::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
  Event a, b;
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    rt::check(cu.cuEventRecord(a.get(), stream), "cuEventRecord");
    launch(stream);
    rt::check(cu.cuEventRecord(b.get(), stream), "cuEventRecord");
    rt::check(cu.cuEventSynchronize(b.get()), "cuEventSynchronize");
    float ms = 0;
    rt::check(cu.cuEventElapsedTime(&ms, a.get(), b.get()), "cuEventElapsedTime");
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), times.back()};
}

// The rows the check downloads: n rows evenly spread over [0, Q), first and last included.
std::vector<int64_t> rows_to_check(int64_t Q, int n) {
  std::set<int64_t> rows;
  if (n == 1) rows.insert(Q - 1);
  for (int i = 0; n > 1 && i < n; ++i) rows.insert(int64_t(double(i) * double(Q - 1) / (n - 1) + 0.5));
  return {rows.begin(), rows.end()};
}

struct FusedRun {
  Timing t;
  std::vector<int> indices;  // [Q, k], relative to the window start (0 here)
  uint32_t fallback_rows = 0, bad_windows = 0;
  size_t workspace = 0;
};

FusedRun run_fused(const ops::TopkOp& op, const ops::TopkInputs& in, int64_t Q,
                   const BenchArgs& a) {
  const int k = op.problem().k;
  FusedRun r;
  r.workspace = op.workspace_bytes();
  rt::DeviceBuffer idx(size_t(Q) * k * 4), ws(std::max<size_t>(r.workspace, 256));
  const ops::TensorView out = view(idx, ops::DType::I32, {Q, k});
  // Indices only: what the DSA indexer consumes (scores are optional outputs).
  r.t = time_launches(
      [&](CUstream s) { op.execute(in, &out, nullptr, ws.data(), ws.size(), s); }, a.warmup,
      a.repeats);
  r.indices.resize(size_t(Q) * k);
  idx.download(r.indices.data(), r.indices.size() * 4);
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
  std::vector<int64_t> rows;              // the downloaded rows
  std::vector<std::vector<float>> scores;  // their visible prefix [0, window end)
  size_t extra_bytes = 0;                  // the score matrix + workspace
};

MaterializeRun run_materialize(const ops::TopkOp& op, const ops::TopkInputs& in,
                               const Shape& s, const BenchArgs& a) {
  MaterializeRun r;
  const size_t matrix = size_t(s.Q) * size_t(s.T) * 4;
  const size_t ws_bytes = op.workspace_bytes();
  r.extra_bytes = matrix + ws_bytes;
  rt::DeviceBuffer sc(matrix), ws(std::max<size_t>(ws_bytes, 256));
  const ops::TensorView out = view(sc, ops::DType::F32, {s.Q, s.T});
  r.t = time_launches(
      [&](CUstream st) { op.execute(in, nullptr, &out, ws.data(), ws.size(), st); }, a.warmup,
      a.repeats);
  // Only the checked rows come back: the whole matrix would not fit host memory at 1M.
  r.rows = rows_to_check(s.Q, a.check_rows);
  for (int64_t row : r.rows) {
    const int64_t end = s.causal ? s.T - s.Q + row + 1 : s.T;
    std::vector<float>& dst = r.scores.emplace_back(size_t(end));
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
    if (rows_checked == 0) return std::nullopt;
    return rows_differing == 0 && rows_malformed == 0;
  }
};

// Every fused row: min(k, window) distinct indices in [0, window), then -1 padding.
int64_t malformed_rows(const std::vector<int>& idx, const Shape& s) {
  int64_t bad = 0;
  std::vector<int> row(s.k);
  for (int64_t r = 0; r < s.Q; ++r) {
    const int64_t window = s.causal ? s.T - s.Q + r + 1 : s.T;
    const int64_t n = std::min<int64_t>(s.k, window);
    std::copy_n(&idx[size_t(r) * s.k], s.k, row.begin());
    bool ok = std::all_of(row.begin() + n, row.end(), [](int v) { return v == -1; });
    std::sort(row.begin(), row.begin() + n);
    ok = ok && (n == 0 || (row[0] >= 0 && row[n - 1] < window));
    ok = ok && std::adjacent_find(row.begin(), row.begin() + n) == row.begin() + n;
    bad += !ok;
  }
  return bad;
}

// The checked rows: fused index set == exact select over the materialized scores, bit
// for bit (the same rank order, ties to the smaller index).
CheckResult check(const FusedRun& f, const MaterializeRun& m, const Shape& s) {
  CheckResult c;
  c.rows_malformed = malformed_rows(f.indices, s);
  for (size_t i = 0; i < m.rows.size(); ++i) {
    const int64_t row = m.rows[i];
    const std::vector<float>& sc = m.scores[i];
    std::vector<int64_t> want = ops::select_topk_row(sc.data(), 0, int64_t(sc.size()), s.k);
    std::vector<int64_t> got;
    for (int j = 0; j < s.k; ++j)
      if (int v = f.indices[size_t(row) * s.k + j]; v >= 0) got.push_back(v);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    if (want != got && c.rows_differing++ < 3) {
      std::vector<int64_t> only_got;
      std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                          std::back_inserter(only_got));
      fmt::print(stderr, "  row {}: {} keys, want {}; {} chosen keys not in the exact set\n", row,
                 got.size(), want.size(), only_got.size());
    }
    ++c.rows_checked;
  }
  return c;
}

// ---------------------------------------------------------------------------------------
// Records

struct Meta {
  std::string gpu, commit, date;
  Ceilings ceilings;
};

std::string utc_date() {
  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return date;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

std::string json_bool(std::optional<bool> b) { return !b ? "null" : *b ? "true" : "false"; }

// One size's results, for the records and the table.
struct SizeResult {
  Shape shape;
  FusedRun fused;
  std::optional<MaterializeRun> mat;  // absent when the matrix does not fit the device
  CheckResult check;
  double floor_ms = 0, flop_floor_ms = 0, byte_floor_ms = 0;
};

std::string record(const BenchArgs& a, const Meta& m, const SizeResult& r, const char* impl,
                   const Timing& t, double bytes, size_t extra_mem, std::string extra_fields) {
  const Shape& s = r.shape;
  return fmt::format(
      "{{\"workload\": \"{}\", \"impl\": \"{}\", \"params\": {{\"Q\": {}, \"T\": {}, \"H\": {}, "
      "\"d\": {}, \"k\": {}, \"q_dtype\": \"{}\", \"k_dtype\": \"{}\"}}, "
      "\"ms_median\": {:.4f}, \"ms_min\": {:.4f}, \"ms_max\": {:.4f}, \"tflops\": {:.2f}, "
      "\"gbps\": {:.2f}, \"floor_ms\": {:.4f}, \"ratio_to_floor\": {:.4f}, "
      "\"extra_mem_bytes\": {}{}, \"repeats\": {}, \"warmup\": {}, \"gpu\": {}, "
      "\"commit\": \"{}\", \"date\": \"{}\"}}",
      a.workload->name, impl, s.Q, s.T, s.H, s.d, s.k, dtype_flag(a.dtype), dtype_flag(a.dtype),
      t.median, t.min, t.max, s.flop() / t.median / 1e9, bytes / t.median / 1e6, r.floor_ms,
      t.median / r.floor_ms, extra_mem, extra_fields, a.repeats, a.warmup, json_string(m.gpu),
      m.commit, m.date);
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
  out.push_back(record(a, m, r, "winnow", r.fused.t, s.winnow_bytes(), r.fused.workspace, wf));
  if (r.mat) {
    out.push_back(record(a, m, r, "materialize", r.mat->t, s.materialize_bytes(),
                         r.mat->extra_bytes,
                         fmt::format(", \"exact\": {}, \"fallbacks\": 0, \"includes_topk\": false",
                                     exact)));
  }
  const Timing floor{float(r.floor_ms), float(r.floor_ms), float(r.floor_ms)};
  const Ceilings& c = m.ceilings;
  out.push_back(record(
      a, m, r, "floor", floor, s.winnow_bytes(), 0,
      fmt::format(", \"exact\": null, \"fallbacks\": 0, \"flop_floor_ms\": {:.4f}, "
                  "\"byte_floor_ms\": {:.4f}, \"ceiling_tflops\": {}, \"copy_tbps\": {}, "
                  "\"ceilings\": \"{}\"",
                  r.flop_floor_ms, r.byte_floor_ms,
                  a.dtype == ops::DType::BF16 ? c.bf16_tflops : c.fp8_tflops, c.copy_tbps,
                  c.source())));
  return out;
}

void emit(const std::string& out_path, const std::vector<std::string>& lines) {
  for (const auto& l : lines) fmt::print("{}\n", l);
  std::fflush(stdout);
  if (out_path.empty()) return;
  if (FILE* f = std::fopen(out_path.c_str(), "a")) {
    for (const auto& l : lines) std::fputs((l + "\n").c_str(), f);
    std::fclose(f);
  } else {
    fmt::print(stderr, "cannot append to {}\n", out_path);
  }
}

void print_table(const BenchArgs& a, const std::vector<SizeResult>& results) {
  fmt::print(stderr, "\n{:<19} {:>8} {:<12} {:>10} {:>9} {:>9} {:>9} {:>11} {:>6}\n",
             "workload", "T", "impl", "ms", "TFLOP/s", "/floor", "/mat", "extra MB", "exact");
  for (const SizeResult& r : results) {
    const double flop = r.shape.flop();
    const std::string exact = json_bool(r.check.exact());
    auto row = [&](const char* impl, double ms, std::string vs_mat, double extra) {
      const bool measured = std::strcmp(impl, "floor") != 0;
      fmt::print(stderr, "{:<19} {:>8} {:<12} {:>10.3f} {:>9.1f} {:>9.3f} {:>9} {:>11.1f} {:>6}\n",
                 a.workload->name, r.shape.T, impl, ms, flop / ms / 1e9, ms / r.floor_ms,
                 vs_mat, extra / 1e6, measured ? exact : "-");
    };
    const std::string ratio =
        r.mat ? fmt::format("{:.3f}", r.fused.t.median / r.mat->t.median) : "-";
    row("winnow", r.fused.t.median, ratio, double(r.fused.workspace));
    if (r.mat) row("materialize", r.mat->t.median, "1.000", double(r.mat->extra_bytes));
    row("floor", r.floor_ms, "-", 0);
  }
}

// ---------------------------------------------------------------------------------------
// The run

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ops::TopkProblem make_problem(const BenchArgs& a, const rt::Context& ctx) {
  ops::TopkProblem p;
  p.score = ir::relu_mh(true);
  p.heads = a.workload->heads;
  p.head_dim = kHeadDim;
  p.q_dtype = a.dtype;
  p.k_dtype = a.dtype;
  p.k = a.k;
  p.arch = ops::device_arch(ctx);
  return p;
}

// The problem of one size: causal_offset depends on T (the chunk is the last Q positions).
ops::TopkProblem sized(ops::TopkProblem p, const BenchArgs& a, int64_t T, ops::Mode mode) {
  p.mode = mode;
  if (a.workload->causal) {
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = 1;
    p.causal_offset = T - a.queries;
  }
  return p;
}

std::unique_ptr<ops::TopkOp> build_op(const ops::TopkProblem& p, const rt::Context& ctx,
                                      rt::CubinCache& cache, const backend::Backend& be) {
  auto op = ops::TopkOp::create(p, &ctx);
  op->build(cache, be);
  return op;
}

DeviceInputs make_inputs(const ops::TopkProblem& p, const BenchArgs& a, int64_t max_t) {
  auto t0 = std::chrono::steady_clock::now();
  fmt::print(stderr, "generating inputs: q {} x {} x {}, k {} x {} ({}) ... ", a.queries, p.heads,
             p.head_dim, max_t, p.head_dim, dtype_flag(a.dtype));
  std::mt19937_64 rng(a.seed);
  const ops::ProblemData d = ops::random_problem(p, a.queries, max_t, rng);
  fmt::print(stderr, "{:.1f} s\n", seconds_since(t0));
  t0 = std::chrono::steady_clock::now();
  fmt::print(stderr, "uploading {:.1f} MB ... ",
             (d.q.bytes.size() + d.k.bytes.size() + 4 * (d.w.size() + d.kscale.size())) / 1e6);
  DeviceInputs in;
  in.queries = a.queries;
  in.q = upload(d.q.bytes);
  in.k = upload(d.k.bytes);
  in.w = upload(d.w);
  in.kscale = upload(d.kscale);
  fmt::print(stderr, "{:.1f} s\n", seconds_since(t0));
  return in;
}

bool matrix_fits(size_t bytes) {
  size_t free = 0, total = 0;
  rt::check(rt::driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  // Leave room for the fused buffers still alive and the allocator's granularity.
  return bytes + (size_t(1) << 30) <= free;
}

SizeResult run_size(const BenchArgs& a, const ops::TopkProblem& base, int64_t T,
                    const DeviceInputs& dev, const rt::Context& ctx, rt::CubinCache& cache,
                    const backend::Backend& be, const Ceilings& c) {
  SizeResult r;
  r.shape = {a.queries, T, base.heads, base.head_dim, a.k, ops::dtype_bytes(a.dtype),
             a.workload->causal};
  const Shape& s = r.shape;
  r.flop_floor_ms = s.flop() / ((a.dtype == ops::DType::BF16 ? c.bf16_tflops : c.fp8_tflops) * 1e9);
  r.byte_floor_ms = s.winnow_bytes() / (c.copy_tbps * 1e9);
  // The physical limit is the larger; at these sizes it is always the FLOP floor.
  r.floor_ms = std::max(r.flop_floor_ms, r.byte_floor_ms);

  auto t0 = std::chrono::steady_clock::now();
  auto fused = build_op(sized(base, a, T, ops::Mode::TopK), ctx, cache, be);
  auto mat = build_op(sized(base, a, T, ops::Mode::Materialize), ctx, cache, be);
  fmt::print(stderr, "T={}: kernels built (compile or cache) in {:.1f} s\n", T, seconds_since(t0));
  fmt::print(stderr, "T={}: winnow kernel: {}\nT={}: materialize kernel: {}\n", T,
             fused->launch_info(), T, mat->launch_info());
  const ops::TopkInputs in = dev.for_size(fused->problem(), T);

  t0 = std::chrono::steady_clock::now();
  r.fused = run_fused(*fused, in, a.queries, a);
  fmt::print(stderr, "T={}: winnow {:.3f} ms median ({} runs, {:.1f} s)\n", T, r.fused.t.median,
             a.warmup + a.repeats, seconds_since(t0));

  const size_t matrix = size_t(a.queries) * size_t(T) * 4;
  if (matrix_fits(matrix)) {
    t0 = std::chrono::steady_clock::now();
    r.mat = run_materialize(*mat, in, s, a);
    fmt::print(stderr, "T={}: materialize {:.3f} ms median ({:.1f} s)\n", T, r.mat->t.median,
               seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    r.check = check(r.fused, *r.mat, s);
    fmt::print(stderr, "T={}: check of {} rows: {} differing, {} of {} rows malformed ({:.1f} s)\n",
               T, r.check.rows_checked, r.check.rows_differing, r.check.rows_malformed, s.Q,
               seconds_since(t0));
    r.mat->scores = {};  // the table and the records need only the timings
    r.fused.indices = {};
  } else {
    fmt::print(stderr, "T={}: the {:.1f} GB score matrix does not fit the device: no "
               "materialize run, no check\n", T, matrix / 1e9);
  }
  return r;
}

}  // namespace

int bench_main(int argc, char** argv) {
  BenchArgs a;
  if (!parse_args(argc, argv, a)) {
    fmt::print("{}", kHelp);
    return 0;
  }
  std::string why;
  if (!rt::gpu_available(&why)) {
    fmt::print(stderr, "winnow bench needs a GPU ({})\n", why);
    return 1;
  }
  rt::Context ctx(0);
  Meta meta{ctx.info().name, winnow::build_id(), utc_date(), read_ceilings(a.ceilings_path)};
  const ops::TopkProblem base = make_problem(a, ctx);
  fmt::print(stderr, "winnow bench {} on {} ({}): Q={} H={} d={} k={} {}, T in [{}]; ceilings {}\n",
             a.workload->name, meta.gpu, base.arch.str(), a.queries, base.heads, base.head_dim,
             a.k, dtype_flag(a.dtype), fmt::join(a.sizes, ", "), meta.ceilings.source());

  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  const DeviceInputs dev =
      make_inputs(base, a, *std::max_element(a.sizes.begin(), a.sizes.end()));

  std::vector<SizeResult> results;
  bool all_exact = true;
  for (int64_t T : a.sizes) {
    results.push_back(run_size(a, base, T, dev, ctx, cache, *be, meta.ceilings));
    emit(a.out_path, size_records(a, meta, results.back()));
    all_exact = all_exact && results.back().check.exact().value_or(true);
  }
  print_table(a, results);
  if (!all_exact) fmt::print(stderr, "\nNOT EXACT: see rows_differing / rows_malformed\n");
  return all_exact ? 0 : 1;
}

}  // namespace winnow::tools

int run_bench(int argc, char** argv) { return winnow::tools::bench_main(argc, argv); }
