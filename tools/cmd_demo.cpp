// `winnow demo`: the fused lightning-indexer top-k on a built-in DSA-shaped problem,
// against the pipeline a user would otherwise run: the score matrix, then an exact top-k
// over it. With a GPU: time (CUDA events, median after a warm-up run) and extra device
// memory of the fused op, of winnow's materialize kernel alone (the score matrix) and of
// materialize + torch.topk (torch.topk timed by python3 on a matrix of the same shape,
// when torch with CUDA is importable); then a one-line verdict, and the exactness check:
// every fused row equal, bit for bit, to the exact select over the materialized scores (on
// the host, in the kernels' rank order: ops::same_selection), sampled rows within rounding
// of the CPU double reference.
// Without a GPU: say so, compile for sm_90a, print the plan and run the CPU reference.
#include <fmt/format.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "compiler/backend/backend.h"
#include "testing/harness.h"
#include "testing/reference.h"
#include "compiler/build_id.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "tools/commands.h"

namespace winnow::tools {
namespace {

struct DemoArgs {
  int64_t rows = 2048, keys = 65536;
  int heads = 64, dim = 128, k = 2048, repeats = 10;
  bool torch = true;  // time materialize + torch.topk when python3 has torch with CUDA
  std::string json;   // append docs/performance.md records here
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ops::TopkProblem demo_problem(const DemoArgs& a) {
  ops::TopkProblem p;
  p.score = ir::relu_mh(true);
  p.heads = a.heads;
  p.head_dim = a.dim;
  p.q_dtype = ops::DType::E4M3;
  p.k_dtype = ops::DType::E4M3;
  p.k = a.k;
  return p;
}

// Rows whose fused result differs from materialize + exact select.
int64_t rows_differing(const ops::TopkProblem& p, const ops::ProblemData& d,
                       const ops::RunResult& fused, const ops::RunResult& mat) {
  const ops::HostInputs host = d.host(p);
  int64_t bad = 0;
  for (int64_t r = 0; r < d.rows; ++r) {
    const ops::KeyWindow w = ops::row_window(p, host, r);
    bad += !ops::same_selection(&fused.indices[r * p.k], p.k, w.start,
                                &mat.scores[r * d.num_keys], w.start, w.end);
  }
  return bad;
}

// Sampled rows against the CPU double reference: keys chosen differently must be ties
// within fp32 rounding of the k-th score.
int64_t reference_mismatches(const ops::TopkProblem& p, const ops::ProblemData& d,
                             const ops::RunResult& fused, const std::vector<int64_t>& rows) {
  const ops::HostInputs host = d.host(p);
  int64_t bad = 0;
  for (int64_t r : rows) {
    auto want = ops::reference_topk_row(p, host, r);
    std::set<int64_t> ref(want.begin(), want.end());
    if (want.empty()) continue;
    const double kth = ops::reference_score(p, host, r, want.back());
    for (int i = 0; i < p.k; ++i) {
      int v = fused.indices[r * p.k + i];
      if (v < 0 || ref.count(v)) continue;
      double s = ops::reference_score(p, host, r, v);
      bad += std::abs(s - kth) > ops::score_tolerance(p, host, r, v, kth, 1e-4) +
                                     ops::score_tolerance(p, host, r, want.back(), kth, 0);
    }
  }
  return bad;
}

// Appends one record; false (with a message) when the file cannot be written.
bool append_json(const std::string& path, const std::string& line) {
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "a");
  bool ok = f && std::fputs((line + "\n").c_str(), f) >= 0;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok) fmt::print(stderr, "winnow demo: cannot write --json {}\n", path);
  return ok;
}

// "12.3 MB", "1.07 GB".
std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  return fmt::format("{:.1f} MB", bytes / 1e6);
}

// torch.topk(k, dim=1, sorted=False) over an N(0, 1) fp32 [rows, keys] matrix on the GPU,
// timed by python3 with CUDA events (median after warm-up); its time depends on the shape,
// not the values. extra_bytes: its outputs (fp32 values, int64 indices) and scratch, the
// peak that torch's allocator saw above the matrix.
struct TorchTopk {
  double ms_median = 0, ms_min = 0, ms_max = 0;
  size_t extra_bytes = 0;
  std::string version;
};

// Double quotes only: the shell takes it between single quotes.
constexpr const char* kTorchTopkScript = R"py(import sys
try:
    import torch
except Exception as e:
    print("skip torch is not importable (" + type(e).__name__ + ")")
    sys.exit(0)
if not torch.cuda.is_available():
    print("skip torch " + torch.__version__ + " sees no CUDA device")
    sys.exit(0)
rows, keys, k, repeats = (int(a) for a in sys.argv[1:5])
x = torch.randn(rows, keys, device="cuda", dtype=torch.float32)
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
for _ in range(3):
    torch.topk(x, k, dim=1, sorted=False)
torch.cuda.synchronize()
extra = torch.cuda.max_memory_allocated() - base
times = []
for _ in range(repeats):
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    torch.topk(x, k, dim=1, sorted=False)
    b.record()
    b.synchronize()
    times.append(a.elapsed_time(b))
times.sort()
print("ok", times[len(times) // 2], times[0], times[-1], extra, torch.__version__)
)py";

// Runs kTorchTopkScript (at most two minutes); nullopt with `why` set when it gives no time.
std::optional<TorchTopk> time_torch_topk(const DemoArgs& a, std::string& why) {
  const std::string command =
      fmt::format("timeout 120 python3 -c '{}' {} {} {} {} 2>&1", kTorchTopkScript, a.rows,
                  a.keys, a.k, a.repeats);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    why = "cannot start python3";
    return std::nullopt;
  }
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("skip ", 0) == 0) {
      why = line.substr(5);
      return std::nullopt;
    }
    TorchTopk t;
    std::istringstream words(line);
    std::string tag;
    if (words >> tag >> t.ms_median >> t.ms_min >> t.ms_max >> t.extra_bytes >> t.version &&
        tag == "ok")
      return t;
    if (!line.empty()) last = line;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 124) why = "python3 took over 120 s";
  else if (code == 127) why = "no python3 (or no timeout) on the PATH";
  else why = fmt::format("python3 exited {}{}", code, last.empty() ? "" : ": " + last);
  return std::nullopt;
}

// The table of the pipelines and the verdict on the fused op against the pipeline a user
// would otherwise run: materialize + torch.topk, or the score matrix alone (a lower bound
// on any such pipeline) when torch.topk was not timed.
void print_comparison(const ops::RunResult& fused, const ops::RunResult& mat, size_t fused_extra,
                      size_t mat_extra, const std::optional<TorchTopk>& torch) {
  fmt::print("\n{:<36} {:>9} {:>9} {:>13}\n", "pipeline", "ms median", "ms min", "extra memory");
  auto row = [](const std::string& name, double median, double min, size_t extra,
                const char* what) {
    fmt::print("{:<36} {:>9.3f} {:>9.3f} {:>13}{}{}\n", name, median, min, bytes_text(extra),
               *what ? "  " : "", what);
  };
  row("fused score + top-k (winnow)", fused.ms_median, fused.ms_min, fused_extra, "workspace");
  row("score matrix (winnow materialize)", mat.ms_median, mat.ms_min, mat_extra,
      "scores + workspace");
  double pipeline_ms = mat.ms_median;
  size_t pipeline_extra = mat_extra;
  if (torch) {
    row("  then torch.topk over it", torch->ms_median, torch->ms_min, torch->extra_bytes,
        "outputs + scratch");
    pipeline_ms += torch->ms_median;
    pipeline_extra += torch->extra_bytes;
    row("materialize + torch.topk", pipeline_ms, mat.ms_min + torch->ms_min, pipeline_extra, "");
  }

  const double fused_ms = fused.ms_median;
  const std::string memory =
      fused_extra <= pipeline_extra
          ? fmt::format("{} less device memory", bytes_text(double(pipeline_extra - fused_extra)))
          : fmt::format("{} more device memory", bytes_text(double(fused_extra - pipeline_extra)));
  if (torch) {
    const std::string speed = fused_ms <= pipeline_ms
                                  ? fmt::format("{:.2f}x faster than", pipeline_ms / fused_ms)
                                  : fmt::format("{:.2f}x slower than", fused_ms / pipeline_ms);
    fmt::print("\nfused top-k: {} materialize + torch.topk ({:.3f} ms against {:.3f} ms), {}\n",
               speed, fused_ms, pipeline_ms, memory);
  } else {
    const std::string speed = fused_ms <= pipeline_ms
                                  ? fmt::format("{:.2f}x faster than", pipeline_ms / fused_ms)
                                  : fmt::format("{:.2f}x the time of", fused_ms / pipeline_ms);
    fmt::print("\nfused top-k: {} the score matrix alone ({:.3f} ms against {:.3f} ms), before "
               "any top-k over it; {}\n",
               speed, fused_ms, pipeline_ms, memory);
  }
}

// The checks `bench` makes, before anything is compiled or allocated.
void validate(const DemoArgs& a) {
  if (a.rows < 1) throw UsageError(fmt::format("--rows must be at least 1, got {}", a.rows));
  if (a.heads < 1 || a.heads > ops::kMaxHeads)
    throw UsageError(fmt::format("--heads must be in 1..{}, got {}", ops::kMaxHeads, a.heads));
  if (a.k < 1 || a.k > ops::kMaxK)
    throw UsageError(fmt::format("--k must be in 1..{}, got {}", ops::kMaxK, a.k));
  if (a.keys < a.k)
    throw UsageError(fmt::format("--keys {} is below --k {}: every row would hold fewer keys "
                                 "than it selects", a.keys, a.k));
  if (a.repeats < 1)
    throw UsageError(fmt::format("--repeats must be at least 1, got {}", a.repeats));
  if (!a.json.empty()) {
    // Opened (created) now, so a path that cannot be written fails before the run.
    FILE* f = std::fopen(a.json.c_str(), "a");
    if (!f)
      throw UsageError(fmt::format("--json {}: cannot write it: {}", a.json, std::strerror(errno)));
    std::fclose(f);
  }
}

int demo_without_gpu(const DemoArgs& a, const std::string& why) {
  fmt::print("winnow demo: no GPU here ({}).\n", why);
  fmt::print("Nothing is timed. Compiling the fused kernel for sm_90a, printing its plan and\n"
             "running the CPU reference on a small problem. On a GPU the demo times the fused\n"
             "top-k against materialize + exact top-k and checks that they agree.\n\n");
  ops::TopkProblem p = demo_problem(a);
  p.arch = backend::parse_arch("sm_90a");
  auto op = ops::TopkOp::create(p, nullptr);
  rt::CubinCache cache(std::nullopt);
  auto be = backend::make_nvrtc_backend();
  auto t0 = std::chrono::steady_clock::now();
  op->build(cache, *be);
  fmt::print("problem  relu_mh H={} d={} fp8, {} queries x {} keys, k = {}\n", a.heads, a.dim,
             a.rows, a.keys, a.k);
  fmt::print("score    {}\ncompiled for sm_90a with {} {}: {} bytes of cubin in {:.2f} s\n",
             ir::print(op->problem().score), be->name(), be->version(), op->cubin().size(),
             seconds_since(t0));
  fmt::print("plan:\n");
  std::istringstream plan(op->plan_text());
  for (std::string line; std::getline(plan, line);) fmt::print("  {}\n", line);
  fmt::print("\n");

  // A small problem of the same shape on the CPU (the GPU one would take hours here).
  const int64_t rows = 2, keys = 4096;
  std::mt19937_64 rng(std::random_device{}());
  ops::ProblemData d = ops::random_problem(p, rows, keys, rng);
  const ops::HostInputs host = d.host(p);
  ops::TopkProblem small = p;
  small.k = std::min<int>(p.k, 16);
  t0 = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < rows; ++r) {
    auto top = ops::reference_topk_row(small, host, r);
    fmt::print("CPU reference, row {} of {} x {} keys, top {}:", r, rows, keys, small.k);
    for (size_t i = 0; i < top.size() && i < 8; ++i) {
      fmt::print(" {}({:.3f})", top[i], ops::reference_score(small, host, r, top[i]));
    }
    fmt::print(" ...\n");
  }
  fmt::print("CPU reference took {:.2f} s. Run on a GPU machine for the timings.\n",
             seconds_since(t0));
  return 0;
}

}  // namespace

int demo_main(int argc, char** argv) {
  DemoArgs a;
  Args args(argc, argv);
  for (std::string flag; args.next(flag);) {
    if (flag == "--rows") a.rows = args.int_value();
    else if (flag == "--keys") a.keys = args.int_value();
    else if (flag == "--heads") a.heads = args.int_value();
    else if (flag == "--k") a.k = args.int_value();
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--no-torch") args.no_value(), a.torch = false;
    else if (flag == "--json") a.json = args.value();
    else if (flag == "--help" || flag == "-h") {
      fmt::print(
          "winnow demo [--rows N] [--keys T] [--heads H] [--k K] [--repeats R] [--no-torch]\n"
          "            [--json FILE]\n"
          "  The fused relu_mh top-k (fp8 q and k, per-key scale, d = 128) on random data.\n"
          "  Defaults: rows 2048, keys 65536, H 64, k 2048, 10 timed repeats.\n"
          "  With a GPU: time (median after a warm-up run) and extra device memory of the\n"
          "  fused op against the score matrix (winnow's materialize kernel) and against\n"
          "  materialize + torch.topk (timed by python3 when torch with CUDA is importable;\n"
          "  --no-torch skips it), and a check that every fused row equals the exact top-k\n"
          "  of the materialized scores. Without one: compile for sm_90a, print the plan and\n"
          "  run the CPU reference.\n");
      return 0;
    } else {
      unknown_argument(flag);
    }
  }
  validate(a);
  std::string why;
  if (!rt::gpu_available(&why)) return demo_without_gpu(a, why);

  rt::Context ctx(0);
  ops::TopkProblem p = demo_problem(a);
  p.arch = ops::device_arch(ctx);
  fmt::print("winnow demo on {} ({}): relu_mh H={} d={} fp8, {} queries x {} keys, k = {}\n",
             ctx.info().name, p.arch.str(), a.heads, a.dim, a.rows, a.keys, a.k);
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  auto t0 = std::chrono::steady_clock::now();
  auto fused = ops::TopkOp::create(p, &ctx);
  fused->build(cache, *be);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  auto mat = ops::TopkOp::create(pm, &ctx);
  mat->build(cache, *be);
  fmt::print("build (compile or cache): {:.2f} s\nfused kernel: {}\nmaterialize kernel: {}\n",
             seconds_since(t0), fused->launch_info(), mat->launch_info());

  std::mt19937_64 rng(std::random_device{}());
  t0 = std::chrono::steady_clock::now();
  ops::ProblemData d = ops::random_problem(p, a.rows, a.keys, rng);
  fmt::print("random inputs: {:.2f} s\n", seconds_since(t0));
  ops::RunResult rf = ops::run_on_device(*fused, ctx, d, a.repeats);
  ops::RunResult rm = ops::run_on_device(*mat, ctx, d, a.repeats);
  const double flop = 2.0 * a.rows * a.keys * a.heads * a.dim;
  t0 = std::chrono::steady_clock::now();
  const int64_t differing = rows_differing(p, d, rf, rm);
  const std::vector<int64_t> sampled = {0, a.rows / 2, a.rows - 1};
  const int64_t ref_bad = reference_mismatches(p, d, rf, sampled);
  const bool exact = differing == 0 && ref_bad == 0;
  fmt::print("exactness check: {:.2f} s\n", seconds_since(t0));

  std::optional<TorchTopk> torch;
  std::string torch_why = "--no-torch";
  if (a.torch) {
    t0 = std::chrono::steady_clock::now();
    torch = time_torch_topk(a, torch_why);
    if (torch)
      fmt::print("torch.topk: torch {} in python3, on N(0, 1) fp32 scores of the same shape "
                 "({:.1f} s)\n", torch->version, seconds_since(t0));
  }
  if (!torch) fmt::print("torch.topk: skipped ({})\n", torch_why);

  // Extra device memory: what each pipeline allocates beyond the inputs and the [rows, k]
  // result they share.
  const size_t fused_extra = fused->workspace_bytes();
  const size_t mat_extra = size_t(a.rows) * size_t(a.keys) * 4 + mat->workspace_bytes();
  print_comparison(rf, rm, fused_extra, mat_extra, torch);
  if (exact) {
    fmt::print("same results: yes, every fused row equals the exact top-k of the materialized "
               "scores bit for bit ({} rows; {} also within rounding of the CPU double "
               "reference); fallback rows: {}\n", a.rows, sampled.size(), rf.fallback_rows);
  } else {
    fmt::print("same results: NO, {} of {} fused rows differ from the exact top-k of the "
               "materialized scores; {} keys outside the CPU double reference's ties in {} "
               "sampled rows; fallback rows: {}\n", differing, a.rows, ref_bad, sampled.size(),
               rf.fallback_rows);
  }

  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  auto record = [&](const char* impl, double ms_median, double ms_min, double ms_max,
                    size_t extra, const char* exact_field, uint32_t fallbacks) {
    return fmt::format(
        "{{\"workload\": \"demo-dsa\", \"impl\": \"{}\", \"params\": {{\"Q\": {}, \"T\": {}, "
        "\"H\": {}, \"d\": {}, \"k\": {}}}, \"ms_median\": {:.4f}, \"ms_min\": {:.4f}, "
        "\"ms_max\": {:.4f}, \"tflops\": {:.2f}, \"extra_mem_bytes\": {}, \"exact\": {}, "
        "\"fallbacks\": {}, \"gpu\": \"{}\", \"commit\": \"{}\", \"date\": \"{}\"}}",
        impl, a.rows, a.keys, a.heads, a.dim, a.k, ms_median, ms_min, ms_max,
        flop / ms_median / 1e9, extra, exact_field, fallbacks, ctx.info().name,
        winnow::build_id(), date);
  };
  const char* exact_field = exact ? "true" : "false";
  bool written =
      append_json(a.json, record("winnow", rf.ms_median, rf.ms_min, rf.ms_max, fused_extra,
                                 exact_field, rf.fallback_rows)) &&
      append_json(a.json, record("materialize", rm.ms_median, rm.ms_min, rm.ms_max, mat_extra,
                                 exact_field, 0));
  // torch.topk ran on scores of its own: its selection is not checked ("exact": null).
  if (torch && written) {
    written = append_json(
        a.json, record("materialize+torch.topk", rm.ms_median + torch->ms_median,
                       rm.ms_min + torch->ms_min, rm.ms_max + torch->ms_max,
                       mat_extra + torch->extra_bytes, "null", 0));
  }
  return exact && written ? 0 : 1;
}

}  // namespace winnow::tools

int run_demo(int argc, char** argv) { return winnow::tools::demo_main(argc, argv); }
