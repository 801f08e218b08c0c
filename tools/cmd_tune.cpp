// `winnow tune`: tunes one workload's plan on the GPU (ops/topk/topk_tuning.h) and stores the
// winner in the tuning database; `--show` lists the database, `--clear` empties it. Both of
// those work without a GPU; tuning says that it needs one.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <string>

#include "compiler/backend/backend.h"
#include "ops/block/block_tuning.h"
#include "ops/common/names.h"
#include "ops/topk/topk_tuning.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuning_db.h"
#include "tools/bench_common.h"
#include "tools/block_tune_timer.h"
#include "tools/commands.h"
#include "tools/workloads.h"

namespace winnow::tools {
namespace {

constexpr const char* kHelp = R"(winnow tune <workload> [options]
winnow tune --show [--op NAME]
winnow tune --clear

Tunes the plan of one workload of `winnow bench` at one size on this GPU: every point of
the op's tunable space that fits the limits (ops/topk/topk_space.h) is ranked by the cost model,
the cheapest --top are compiled in parallel and timed (CUDA events, L2 flushed, median of
--repeats after --warmup), beside the heuristic plan. The fastest is stored in the tuning
database (<cache folder>/tuning/tuning.sqlite3), where plan builds with the policy
TUNED_IF_PRESENT (the default) find it for every size of the same bucket: rows, keys and k
rounded up to a power of two (keys at least 1024).

Workloads: dsa-prefill, dsa-prefill-causal, dsa-glm, csa-1m, knn-ip, knn-l2, knn-cosine,
block-select (its whole call, the index then the attention, on `structured` input of
length --T with 32 query and 8 KV heads, d = 128: which kernel each step runs,
ops/block/block_space.h; --k and --Q do not apply).

Options:
  --T SIZE        keys T (dsa), the sequence length S (csa) or the corpus N (knn)
                  [the workload's first size]; K and M suffixes (64K = 65536)
  --Q N           queries (dsa) [8192] or batch (knn) [64]
  --k K           keys selected per query [the workload's first k]
  --q-dtype TYPE  q and k type [the workload's]
  --budget-s N    wall-clock seconds for the compiles and timings [60]
  --top N         candidates compiled and timed besides the heuristic plan [12]
  --repeats N     timed runs per candidate [10]
  --warmup N      untimed runs before them [3]
  --show          list the tuned plans (no GPU needed); --op NAME: only that op's
  --clear         remove every tuned plan (no GPU needed)
  -h, --help      this text
)";

struct TuneArgs {
  const Workload* workload = nullptr;
  int64_t size = 0, queries = 0;
  int k = 0;
  std::optional<ops::DType> dtype;
  double budget_s = 60;
  int top = 12, repeats = 10, warmup = 3;
  bool show = false, clear = false, help = false;
  bool block = false;  // block-select (not a topk workload)
  std::string op;
};

TuneArgs parse(int argc, char** argv) {
  TuneArgs a;
  Args args(argc, argv);
  std::string flag;
  while (args.next(flag)) {
    if (flag == "-h" || flag == "--help") {
      a.help = true;
      return a;
    }
    if (flag == "--T") a.size = parse_size(flag, args.value());
    else if (flag == "--Q") a.queries = parse_size(flag, args.value());
    else if (flag == "--k") a.k = int(parse_size(flag, args.value()));
    else if (flag == "--q-dtype" || flag == "--dtype") a.dtype = dtype_value(flag, args.value());
    else if (flag == "--budget-s") a.budget_s = args.int_value();
    else if (flag == "--top") a.top = args.int_value();
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--warmup") a.warmup = args.int_value();
    else if (flag == "--show") { args.no_value(); a.show = true; }
    else if (flag == "--clear") { args.no_value(); a.clear = true; }
    else if (flag == "--op") a.op = args.value();
    else if (flag.rfind("--", 0) == 0) unknown_argument(flag);
    else if (a.workload || a.block) throw UsageError("one workload at a time (got '" + flag + "' too)");
    else if (flag == "block-select") a.block = true;
    else if (!(a.workload = workload_named(flag)))
      throw UsageError("unknown workload '" + flag + "' (winnow tune --help lists them)");
  }
  if (a.block && (a.k > 0 || a.queries > 0 || a.dtype))
    throw UsageError("block-select takes --T (its length), not --k, --Q or --q-dtype");
  if (a.show + a.clear + (a.workload != nullptr || a.block) != 1)
    throw UsageError("give a workload to tune, or --show, or --clear");
  if (!a.op.empty() && !a.show) throw UsageError("--op goes with --show");
  if (a.budget_s <= 0) throw UsageError("--budget-s must be positive");
  if (a.top < 0 || a.repeats < 1 || a.warmup < 0)
    throw UsageError("--top >= 0, --repeats >= 1 and --warmup >= 0");
  return a;
}

std::string date_of(int64_t unix_seconds) {
  std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

int show(const rt::TuningDb& db, const std::string& op) {
  const auto rows = db.list(op);
  if (db.problem()) fmt::print(stderr, "winnow tune: {}\n", *db.problem());
  fmt::print("{} tuned plan{} in {}\n", rows.size(), rows.size() == 1 ? "" : "s",
             db.file().string());
  for (const auto& r : rows) {
    const double ratio = r.record.time_us > 0 && r.record.heuristic_us > 0
                             ? r.record.heuristic_us / r.record.time_us
                             : 0;
    fmt::print("{}\n  plan: {}\n  {:.1f} us, heuristic {:.1f} us ({:.2f}x), tuned {} UTC\n",
               r.key, r.record.params, r.record.time_us, r.record.heuristic_us, ratio,
               date_of(r.record.created));
  }
  return 0;
}

int clear(const rt::TuningDb& db) {
  const long removed = db.clear();
  if (removed < 0) {
    fmt::print(stderr, "winnow tune: could not clear {}{}\n", db.file().string(),
               db.problem() ? " (" + *db.problem() + ")" : "");
    return 1;
  }
  fmt::print("removed {} tuned plan{} from {}\n", removed, removed == 1 ? "" : "s",
             db.file().string());
  return 0;
}

// The workload's problem and shape, as `winnow bench` runs it (tools/workloads.h; the
// window as tools/cmd_bench.cpp's sized gives it).
ops::TopkProblem problem_of(const TuneArgs& a, const Workload& w, const rt::Context& ctx,
                            ops::TopkShape* shape) {
  const ops::DType t = a.dtype.value_or(w.dtype);
  if (std::find(w.dtypes.begin(), w.dtypes.end(), t) == w.dtypes.end())
    throw UsageError(fmt::format("{} does not take --q-dtype {}", w.name, ops::dtype_name(t)));
  ops::TopkProblem p = workload_problem(w, t, w.head_dim, ops::device_arch(ctx));
  p.k = a.k > 0 ? a.k : int(w.ks.front());
  if (w.causal_ratio) {
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = w.causal_ratio;
  }
  const int64_t size = a.size > 0 ? a.size : w.sizes.front();
  if (w.family == Family::Csa && a.queries)
    throw UsageError("csa-1m runs every position: give S with --T, not --Q");
  const RowsKeys rk = workload_rows_keys(w, size, a.queries > 0 ? a.queries : w.queries);
  shape->rows = rk.rows;
  shape->num_keys = rk.keys;
  return p;
}

void progress_line(std::size_t done, std::size_t total, double seconds) {
  constexpr int kWidth = 30;
  const int filled = int(kWidth * done / std::max<std::size_t>(total, 1));
  const double eta = done ? seconds * double(total - done) / double(done) : 0;
  fmt::print(stderr, "\rtune [{}{}] {}/{} steps, {:.1f} s, ETA {:.1f} s   ",
             std::string(size_t(filled), '#'), std::string(size_t(kWidth - filled), '.'), done,
             total, seconds, eta);
  if (done == total) fmt::print(stderr, "\n");
}

// The table of the candidates tried and the winner's line; the exit code (0: stored).
// candidate(i): candidate i's predicted cost, whether it is the heuristic plan, its point.
struct CandidateLine {
  double predicted_us;
  bool baseline;
  std::string point;
};
template <class CandidateOf>
int report(const rt::tune::Result& run, double baseline_us, double best_us, bool stored,
           const CandidateOf& candidate) {
  fmt::print("{:>4} {:>12} {:>12} {:>8}  {:<14} {}\n", "#", "predicted us", "median us",
             "vs heur.", "outcome", "point / launch");
  for (std::size_t j = 0; j < run.tried.size(); ++j) {
    const rt::tune::Measurement& m = run.tried[j];
    const CandidateLine c = candidate(m.candidate);
    const bool timed = m.outcome == rt::tune::Outcome::Timed || m.outcome == rt::tune::Outcome::Dropped;
    fmt::print("{:>4} {:>12.1f} {:>12} {:>8}  {:<14} {}{}\n", j, c.predicted_us,
               timed ? fmt::format("{:.1f}", m.median_us) : "-",
               timed && baseline_us > 0 ? fmt::format("{:.3f}x", baseline_us / m.median_us) : "-",
               std::string(rt::tune::outcome_name(m.outcome)) + (int(j) == run.best ? " *" : ""),
               c.baseline ? "heuristic " : "", c.point);
    if (!m.info.empty()) fmt::print("{:>53}{}\n", "", m.info);
    if (!m.error.empty()) fmt::print("{:>53}{}\n", "", m.error);
  }
  if (run.best < 0) {
    fmt::print(stderr, "winnow tune: no candidate could be timed\n");
    return 1;
  }
  const CandidateLine w = candidate(run.tried[std::size_t(run.best)].candidate);
  fmt::print("winner: {} at {:.1f} us ({:.3f}x the heuristic plan's {:.1f} us), {} in {:.1f} s\n",
             w.point, best_us, baseline_us > 0 ? baseline_us / best_us : 0, baseline_us,
             stored ? "stored" : "NOT stored", run.seconds);
  return stored ? 0 : 1;
}

void print_space(std::size_t considered, std::size_t pruned, const std::string& first_pruned,
                 std::size_t duplicates, std::size_t candidates, const char* note) {
  fmt::print("space: {} points, {} pruned by the limits ({}), {} duplicates, {} candidates{}\n",
             considered, pruned, first_pruned.empty() ? "-" : "e.g. " + first_pruned, duplicates,
             candidates, note);
}

int tune_topk_workload(const TuneArgs& a, const rt::TuningDb& db, const rt::Context& ctx,
                       rt::CubinCache& cache, const backend::Backend& be,
                       const rt::tune::Settings& s) {
  ops::TopkShape shape;
  const ops::TopkProblem p = problem_of(a, *a.workload, ctx, &shape);
  fmt::print(stderr, "winnow tune {}: {} rows x {} keys, k = {}, {} on {}\n", a.workload->name,
             shape.rows, shape.num_keys, p.k, ops::dtype_name(p.q_dtype), ctx.info().name);
  const ops::TopkTuneResult r = ops::tune_topk_on_device(p, ctx, cache, be, shape, s, &db);
  print_space(r.space.considered, r.space.pruned, r.space.first_pruned_reason, r.space.duplicates,
              r.space.candidates.size(),
              r.space.retrieval_mode ? " (retrieval mode: its knobs are not in the space yet)" : "");
  return report(r.run, r.baseline_us, r.best_us, r.stored, [&](std::size_t i) {
    const ops::TopkCandidate& c = r.space.candidates[i];
    return CandidateLine{c.predicted_us, c.baseline, c.point.text()};
  });
}

// block-select's problem as `winnow bench block-select` runs it (32 / 8 heads, d = 128).
int tune_block_select(const TuneArgs& a, const rt::TuningDb& db, const rt::Context& ctx,
                      rt::CubinCache& cache, const backend::Backend& be,
                      const rt::tune::Settings& s) {
  const int64_t L = a.size > 0 ? a.size : 131072;
  if (L % ops::kBlockSize != 0)
    throw UsageError(fmt::format("block-select's --T must be a multiple of {}", ops::kBlockSize));
  ops::BlockProblem p;
  p.max_seq_len = std::max<int64_t>(p.max_seq_len, L);
  p.arch = ops::device_arch(ctx);
  fmt::print(stderr, "winnow tune block-select: L = {}, heads {}/{}, d {} on {}\n", L, p.heads,
             p.kv_heads, p.head_dim, ctx.info().name);
  const ops::BlockSpace space = ops::block_space(p, &ctx, L);
  ops::BlockCandidateCompiler compiler(p, space.candidates, cache, be);
  BlockTuneTimer timer(p, space.candidates, ctx, cache, be, L);
  const ops::BlockTuneResult r =
      ops::tune_block(space, compiler, timer, s, &db, ops::block_tuning_key(p, &ctx, be, L));
  print_space(space.considered, space.pruned, space.first_pruned_reason, space.duplicates,
              space.candidates.size(), "");
  return report(r.tuned.run, r.tuned.baseline_us, r.tuned.best_us, r.tuned.stored, [&](std::size_t i) {
    const ops::BlockCandidate& c = r.space.candidates[i];
    return CandidateLine{c.predicted_us, c.baseline, c.point.text()};
  });
}

int tune(const TuneArgs& a, const rt::TuningDb& db) {
  std::string why;
  if (!rt::gpu_available(&why)) {
    fmt::print(stderr,
               "winnow tune: tuning times candidate plans on a GPU, and there is none here "
               "({}). `winnow tune --show` and `--clear` work without one.\n",
               why);
    return 1;
  }
  rt::Context ctx(0);
  rt::CubinCache cache{rt::DiskStore(rt::default_cache_dir())};
  const auto be = backend::make_nvrtc_backend();
  rt::tune::Settings s;
  s.top_n = std::size_t(a.top);
  s.repeats = a.repeats;
  s.warmup = a.warmup;
  s.budget_s = a.budget_s;
  s.progress = progress_line;
  return a.block ? tune_block_select(a, db, ctx, cache, *be, s)
                 : tune_topk_workload(a, db, ctx, cache, *be, s);
}

}  // namespace
}  // namespace winnow::tools

int run_tune(int argc, char** argv) {
  using namespace winnow;
  const tools::TuneArgs a = tools::parse(argc, argv);
  if (a.help) {
    fmt::print("{}", tools::kHelp);
    return 0;
  }
  const rt::TuningDb db(rt::default_cache_dir());
  if (a.show) return tools::show(db, a.op);
  if (a.clear) return tools::clear(db);
  return tools::tune(a, db);
}
