// `winnow bench jit`: how long a new score function waits for its kernel. Per
// (kernel, backend): the cold build (problem -> IR -> plan -> source -> cubin stored in an
// empty cache folder, and loaded when there is a GPU), then a disk hit (a fresh in-memory
// cache over that folder). Needs no GPU: without one the kernels are compiled only and
// execute_host_us is null; with one it is the host time of an execute call on the built
// plan (testing/harness run_on_device: random inputs of 64 rows x 8192 keys).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/build_id.h"
#include "compiler/ir/ir.h"
#include "ops/common/backend_choice.h"
#include "ops/common/names.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "testing/harness.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

namespace winnow::tools {
namespace {

namespace fs = std::filesystem;
using ops::DType;

constexpr const char* kHelp = R"(winnow bench jit [options]

Times the build of a kernel that no cache holds, the way a new score function meets it:
problem -> IR -> plan -> generated source -> backend -> cubin in an empty cache folder
("cold_s"), then the same plan from that folder by a fresh in-memory cache ("disk_hit_s").
One JSON record per (kernel, backend) on stdout; a table on stderr. Needs no GPU (the
kernels are then compiled only and nothing is loaded; execute_host_us is null). With a
GPU, execute_host_us is the median host time of the execute call (validation, parameters,
the launch; not the kernel) over 50 calls on random inputs of 64 rows x 8192 keys.

NVRTC 12.9 and later reuse PTX and cubins from the CUDA driver's compute cache where a
driver is present: this command sets CUDA_CACHE_DISABLE=1 so that every cold build is cold.

Kernels (sm_90a unless --arch):
  relu_mh    the lightning indexer's: relu_mh, H=64, d=128, fp8 + per-key scale, k=2048
  softplus   the user expression sum_h(w[h] * softplus(dot(h))) * kscale, H=16, bf16, k=256
  ip         knn-ip's: ip, d=768, fp16, k=8192
  materialize  ip, d=128, fp32, the score-only kernel (one tile loop)

Options:
  --kernels LIST   comma-separated names from above [relu_mh,softplus]
  --expr TEXT      also a kernel for this expression (H=64, fp8, k=2048; --heads,
                   --q-dtype and --k change them), named "expr"
  --heads H, --q-dtype T, --k K   for --expr
  --backends LIST  nvrtc, llvm or both, comma-separated [nvrtc,llvm where built]
  --repeats N      cold builds per (kernel, backend), each into a new empty folder [3];
                   the first build of a backend in the process also loads the backend
                   (cold_s_runs lists every run; cold_s is their median)
  --arch ARCH      the target [sm_90a; with a GPU, the device's]
  --out FILE       append the JSON records to FILE too
)";

struct JitKernel {
  std::string name;
  ops::TopkProblem problem;
};

ops::TopkProblem problem_of(ir::Expr score, int heads, int head_dim, DType t, int k,
                            ops::Mode mode = ops::Mode::TopK) {
  ops::TopkProblem p;
  p.score = std::move(score);
  p.heads = heads;
  p.head_dim = head_dim;
  p.q_dtype = p.k_dtype = t;
  p.k = k;
  p.mode = mode;
  return p;
}

std::optional<JitKernel> named_kernel(const std::string& name) {
  if (name == "relu_mh") return JitKernel{name, problem_of(ir::relu_mh(true), 64, 128, DType::E4M3, 2048)};
  if (name == "softplus")
    return JitKernel{name, problem_of(ir::parse("sum_h(w[h] * softplus(dot(h))) * kscale"), 16,
                                      128, DType::BF16, 256)};
  if (name == "ip") return JitKernel{name, problem_of(ir::ip(), 1, 768, DType::F16, 8192)};
  if (name == "materialize")
    return JitKernel{name, problem_of(ir::ip(), 1, 128, DType::F32, 256, ops::Mode::Materialize)};
  return std::nullopt;
}

struct JitArgs {
  std::vector<std::string> kernels{"relu_mh", "softplus"};
  std::optional<std::string> expr, q_dtype, arch;
  int heads = 64, k = 2048, repeats = 3;
  std::vector<std::string> backends;
  std::string out_path;
};

// Returns false when --help was asked for.
bool parse_jit_args(int argc, char** argv, JitArgs& a) {
  Args args(argc, argv);
  bool named = false;
  for (std::string flag; args.next(flag);) {
    if (flag == "jit" && !named) named = true;
    else if (flag == "--help" || flag == "-h") return false;
    else if (flag == "--kernels") a.kernels = split_list(args.value());
    else if (flag == "--expr") a.expr = args.value();
    else if (flag == "--heads") a.heads = args.int_value();
    else if (flag == "--q-dtype") a.q_dtype = args.value();
    else if (flag == "--k") a.k = args.int_value();
    else if (flag == "--backends") a.backends = split_list(args.value());
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--arch") a.arch = args.value();
    else if (flag == "--out") a.out_path = args.value();
    else unknown_argument(flag);
  }
  if (a.repeats < 1) throw UsageError("--repeats must be at least 1");
  for (const std::string& b : a.backends)
    if (b != "nvrtc" && b != "llvm") throw UsageError("--backends takes nvrtc and llvm, not '" + b + "'");
  return true;
}

std::vector<JitKernel> kernels_of(const JitArgs& a) {
  std::vector<JitKernel> out;
  for (const std::string& name : a.kernels) {
    std::optional<JitKernel> k = named_kernel(name);
    if (!k) throw UsageError("unknown kernel '" + name + "'; the kernels are relu_mh, softplus, ip, materialize");
    out.push_back(std::move(*k));
  }
  if (a.expr) {
    ir::Expr e;
    try {
      e = ir::parse(*a.expr);
    } catch (const ir::UserError& err) {
      throw UsageError(std::string("--expr: ") + err.what());
    }
    const DType t = a.q_dtype ? dtype_value("--q-dtype", *a.q_dtype) : DType::E4M3;
    JitKernel k{"expr", problem_of(e, a.heads, 128, t, a.k)};
    k.problem.expression = *a.expr;
    out.push_back(std::move(k));
  }
  return out;
}

// An empty folder of our own for one cold build (0700, as the cache's trust rule wants).
class EmptyCacheDir {
 public:
  EmptyCacheDir() {
    std::string tmpl = (fs::temp_directory_path() / "winnow-bench-jit-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a folder in " + tmpl);
    path_ = tmpl;
  }
  ~EmptyCacheDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  EmptyCacheDir(const EmptyCacheDir&) = delete;
  EmptyCacheDir& operator=(const EmptyCacheDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct JitRun {
  std::optional<double> execute_host_us;  // with a GPU
  std::vector<double> cold_s;
  double disk_hit_s = 0;
  size_t cubin_bytes = 0;
  std::string key;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One build of `p` through a fresh in-memory cache over `dir`, in seconds.
double timed_build(const ops::TopkProblem& p, const rt::Context* ctx, const fs::path& dir,
                   const backend::Backend& be, std::unique_ptr<ops::TopkOp>* op) {
  rt::CubinCache cache{rt::DiskStore(dir)};
  const auto t0 = std::chrono::steady_clock::now();
  *op = ops::TopkOp::create(p, ctx);
  (*op)->build(cache, be);
  return seconds_since(t0);
}

JitRun run_kernel(const ops::TopkProblem& p, const rt::Context* ctx, const backend::Backend& be,
                  int repeats) {
  JitRun r;
  for (int i = 0; i < repeats; ++i) {
    EmptyCacheDir dir;
    std::unique_ptr<ops::TopkOp> cold, hit;
    r.cold_s.push_back(timed_build(p, ctx, dir.path(), be, &cold));
    const double disk = timed_build(p, ctx, dir.path(), be, &hit);
    if (hit->cubin() != cold->cubin())
      throw std::runtime_error("the disk hit gave another cubin than the cold build");
    r.disk_hit_s = i == 0 ? disk : std::min(r.disk_hit_s, disk);
    r.cubin_bytes = cold->cubin().size();
    r.key = cold->content_key();
    if (ctx && i == 0) {
      std::mt19937_64 rng(uint64_t(i) + 17);
      const ops::ProblemData d = ops::random_problem(p, 64, 8192, rng);
      r.execute_host_us = ops::run_on_device(*cold, *ctx, d, 50).host_us_median;
    }
  }
  return r;
}

std::string record(const JitKernel& k, const backend::Arch& arch, const backend::Backend& be,
                   const JitRun& r, const std::string& gpu, bool first_in_process) {
  const ops::TopkProblem& p = k.problem;
  const std::string params = fmt::format(
      "{{\"kernel\": {}, \"score\": {}, \"H\": {}, \"d\": {}, \"k\": {}, \"dtype\": \"{}\", "
      "\"mode\": \"{}\", \"arch\": \"{}\"}}",
      json_string(k.name), json_string(ir::print(p.score)), p.heads, p.head_dim, p.k,
      ops::dtype_short_name(p.q_dtype), p.mode == ops::Mode::TopK ? "topk" : "materialize", arch.str());
  std::string runs;
  for (double s : r.cold_s) runs += fmt::format("{}{:.4f}", runs.empty() ? "" : ", ", s);
  return fmt::format(
      "{{\"workload\": \"jit\", \"impl\": \"{}\", \"params\": {}, \"cold_s\": {:.4f}, "
      "\"cold_s_min\": {:.4f}, \"cold_s_max\": {:.4f}, \"cold_s_runs\": [{}], "
      "\"first_run_loads_backend\": {}, \"disk_hit_s\": {:.5f}, \"execute_host_us\": {}, "
      "\"cubin_bytes\": {}, \"backend_version\": {}, \"nvrtc_options\": {}, \"cpu_cores\": {}, "
      "\"gpu\": {}, \"commit\": \"{}\", \"date\": \"{}\"}}",
      be.name(), params, median(r.cold_s),
      *std::min_element(r.cold_s.begin(), r.cold_s.end()), *std::max_element(r.cold_s.begin(), r.cold_s.end()),
      runs, first_in_process ? "true" : "false",
      r.disk_hit_s,
      r.execute_host_us ? fmt::format("{:.2f}", *r.execute_host_us) : "null", r.cubin_bytes,
      json_string(be.version()),
      json_string(rt::env_get("WINNOW_NVRTC_OPTIONS").value_or("")),
      std::thread::hardware_concurrency(), gpu.empty() ? "null" : json_string(gpu),
      winnow::build_id(), utc_date());
}

int bench_jit_main(int argc, char** argv) {
  JitArgs a;
  if (!parse_jit_args(argc, argv, a)) {
    fmt::print("{}", kHelp);
    return 0;
  }
  // Before anything loads NVRTC or the driver: their compute cache would make reruns warm.
  ::setenv("CUDA_CACHE_DISABLE", "1", 1);
  std::vector<JitKernel> kernels = kernels_of(a);
  std::optional<rt::Context> ctx;
  std::string gpu;
  if (rt::gpu_available()) {
    ctx.emplace(0);
    gpu = ctx->info().name;
  }
  backend::Arch arch = ctx ? ops::device_arch(*ctx) : backend::parse_arch("sm_90a");
  if (a.arch) {
    try {
      arch = backend::parse_arch(*a.arch);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format("--arch {}: {}", *a.arch, e.what()));
    }
  }
  if (a.backends.empty()) {
    a.backends = {"nvrtc"};
    try {
      backend::make_llvm_backend();
      if (arch == backend::Arch{9, 0, 'a'}) a.backends.push_back("llvm");
    } catch (const std::runtime_error&) {  // this build has no llvm backend
    }
  }
  fmt::print(stderr, "winnow bench jit: {} ({}), {} cores, {} repeats{}\n",
             gpu.empty() ? "no GPU: compile only" : gpu, arch.str(),
             std::thread::hardware_concurrency(), a.repeats,
             rt::env_get("WINNOW_NVRTC_OPTIONS") ? ", WINNOW_NVRTC_OPTIONS=" + *rt::env_get("WINNOW_NVRTC_OPTIONS") : "");
  fmt::print(stderr, "{:<12} {:<6} {:>9} {:>9} {:>9} {:>11} {:>10}\n", "kernel", "impl", "cold s",
             "min", "max", "disk hit s", "cubin B");
  for (const std::string& name : a.backends) {
    const std::unique_ptr<backend::Backend> be = ops::choose_backend(name.c_str());
    bool first = true;
    for (JitKernel& k : kernels) {
      k.problem.arch = arch;
      const JitRun r = run_kernel(k.problem, ctx ? &*ctx : nullptr, *be, a.repeats);
      emit(a.out_path, {record(k, arch, *be, r, gpu, first)});
      fmt::print(stderr, "{:<12} {:<6} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.4f} {:>10}\n", k.name,
                 be->name(), median(r.cold_s), *std::min_element(r.cold_s.begin(), r.cold_s.end()),
                 *std::max_element(r.cold_s.begin(), r.cold_s.end()), r.disk_hit_s, r.cubin_bytes);
      first = false;
    }
  }
  return 0;
}

}  // namespace
}  // namespace winnow::tools

int run_bench_jit(int argc, char** argv) { return winnow::tools::bench_jit_main(argc, argv); }
