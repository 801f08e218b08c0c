// `winnow demo`: the fused lightning-indexer top-k on a built-in DSA-shaped problem.
// With a GPU: fused vs materialize timing and an exactness check (every row against
// materialize + exact select, sampled rows against the CPU double reference).
// Without one: compile for sm_90a and run the CPU reference, and say so.
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <set>
#include <string>

#include "compiler/backend/backend.h"
#include "testing/harness.h"
#include "testing/reference.h"
#include "compiler/build_id.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "tools/commands.h"
#include "select/rank_order.cuh"

namespace winnow::tools {
namespace {

struct DemoArgs {
  int64_t rows = 2048, keys = 65536;
  int heads = 64, dim = 128, k = 2048, repeats = 10;
  std::string json;  // append docs/performance.md records here
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
  fmt::print("Compiling the fused kernel for sm_90a and running the CPU reference only.\n\n");
  ops::TopkProblem p = demo_problem(a);
  p.arch = backend::parse_arch("sm_90a");
  auto op = ops::TopkOp::create(p, nullptr);
  rt::CubinCache cache(std::nullopt);
  auto be = backend::make_nvrtc_backend();
  auto t0 = std::chrono::steady_clock::now();
  op->build(cache, *be);
  fmt::print("score  {}\ncompiled for sm_90a with {} {}: {} bytes of cubin in {:.2f} s\n",
             ir::print(op->problem().score), be->name(), be->version(), op->cubin().size(),
             seconds_since(t0));

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
  fmt::print("CPU reference took {:.2f} s. Run on a GPU machine for the fused kernel.\n",
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
    else if (flag == "--json") a.json = args.value();
    else if (flag == "--help" || flag == "-h") {
      fmt::print(
          "winnow demo [--rows N] [--keys T] [--heads H] [--k K] [--repeats R] [--json FILE]\n"
          "  The fused relu_mh top-k (fp8 q and k, per-key scale, d = 128) on random data.\n"
          "  Defaults: rows 2048, keys 65536, H 64, k 2048, 10 timed repeats.\n"
          "  With a GPU: fused vs materialize timing and an exactness check; without one:\n"
          "  compile for sm_90a and run the CPU reference.\n");
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
  const int64_t ref_bad = reference_mismatches(p, d, rf, {0, a.rows / 2, a.rows - 1});
  const bool exact = differing == 0 && ref_bad == 0;
  fmt::print("exactness check: {:.2f} s\n\n", seconds_since(t0));

  const size_t mat_bytes = size_t(a.rows) * a.keys * 4;
  fmt::print("{:<12} {:>10} {:>10} {:>12} {:>16}\n", "impl", "ms median", "ms min", "TFLOP/s",
             "extra memory");
  fmt::print("{:<12} {:>10.3f} {:>10.3f} {:>12.1f} {:>13.1f} MB\n", "fused", rf.ms_median,
             rf.ms_min, flop / rf.ms_median / 1e9, fused->workspace_bytes() / 1e6);
  fmt::print("{:<12} {:>10.3f} {:>10.3f} {:>12.1f} {:>13.1f} MB  (score matrix only)\n",
             "materialize", rm.ms_median, rm.ms_min, flop / rm.ms_median / 1e9, mat_bytes / 1e6);
  fmt::print("\nfused / materialize time: {:.2f}\n", rf.ms_median / rm.ms_median);
  fmt::print("exact: {} (rows differing from materialize + exact select: {} of {}; "
             "reference mismatches on sampled rows: {}); fallback rows: {}\n",
             exact ? "yes" : "NO", differing, a.rows, ref_bad, rf.fallback_rows);

  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  auto record = [&](const char* impl, const ops::RunResult& r, size_t extra) {
    return fmt::format(
        "{{\"workload\": \"demo-dsa\", \"impl\": \"{}\", \"params\": {{\"Q\": {}, \"T\": {}, "
        "\"H\": {}, \"d\": {}, \"k\": {}}}, \"ms_median\": {:.4f}, \"ms_min\": {:.4f}, "
        "\"ms_max\": {:.4f}, \"tflops\": {:.2f}, \"extra_mem_bytes\": {}, \"exact\": {}, "
        "\"fallbacks\": {}, \"gpu\": \"{}\", \"commit\": \"{}\", \"date\": \"{}\"}}",
        impl, a.rows, a.keys, a.heads, a.dim, a.k, r.ms_median, r.ms_min, r.ms_max,
        flop / r.ms_median / 1e9, extra, exact ? "true" : "false", r.fallback_rows,
        ctx.info().name, winnow::build_id(), date);
  };
  const bool written = append_json(a.json, record("winnow", rf, fused->workspace_bytes())) &&
                       append_json(a.json, record("materialize", rm, mat_bytes));
  return exact && written ? 0 : 1;
}

}  // namespace winnow::tools

int run_demo(int argc, char** argv) { return winnow::tools::demo_main(argc, argv); }
