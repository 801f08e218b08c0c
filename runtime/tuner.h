// The autotuner's loop, for any op: candidates already pruned by the op's hard
// limits arrive with their predicted cost; the cheapest N are compiled in parallel (the
// compiles are independent), then timed one after another on the device, R runs each
// after a warm-up, and the one with the lowest median wins. Every timing is kept; a point
// that fails to compile or to launch is recorded and skipped. What compiles and what
// times are interfaces, so the loop runs on the CPU against a fake timer in the tests.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace winnow::rt::tune {

struct Candidate {
  std::string params;         // the point as text ("key_tile=64 rows_per_cta=2 ...")
  double predicted_us = 0;    // the op's analytic cost model
  bool baseline = false;      // the heuristic plan: always tried, for the ratio
  // Candidates of one family share the kernel's structure (for the topk op: rows per CTA,
  // key tile and the wgmma path's form) and differ in the rest; "" is a family of its own.
  std::string family;
};

// Compiles candidate i (index into the list given to run_tuner); called from several
// threads at once, each with a different i. Throws on failure (the message is recorded).
class CandidateCompiler {
 public:
  virtual ~CandidateCompiler() = default;
  virtual void compile(std::size_t i) = 0;
};

// Times candidate i on the device, on one thread. prepare(i) loads it (throws when it
// cannot launch); run_us(i) is one run after the L2 was flushed, in microseconds (CUDA
// events around the launch; throws when the launch fails).
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void prepare(std::size_t i) = 0;
  virtual double run_us(std::size_t i) = 0;
  virtual void release(std::size_t i) {}  // done with i: free what prepare held
  // What the loaded candidate i looks like on the device (registers, occupancy), after
  // prepare; "" when nothing is known.
  virtual std::string describe(std::size_t i) { return ""; }
};

struct Settings {
  std::size_t top_n = 12;        // candidates compiled and timed (the baseline besides)
  int warmup = 3;                // runs before the timed ones, not kept
  int repeats = 10;              // timed runs: R
  unsigned compile_threads = 0;  // 0: the host's cores
  double budget_s = 60;          // wall clock for the whole loop (the baseline always
                                 // runs); a candidate that would end past it is not
                                 // started or is stopped (Outcome::OverBudget)
  double drop_ratio = 3;         // a candidate two of whose runs in a row are this much
                                 // slower than the baseline is dropped (0: never), so that
                                 // one slow point does not spend the budget
  // Called after each candidate is compiled or timed: (done, total, seconds so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

// Dropped: two runs in a row slower than Settings::drop_ratio x the baseline's median.
// OverBudget: not started, because the baseline's median times its runs would end past
// the budget, or stopped before a run that its last one says would end past it. Both keep
// the runs they made as their timings (warm-up included); neither can win.
enum class Outcome { Timed, CompileFailed, LaunchFailed, OverBudget, Dropped };
const char* outcome_name(Outcome o);

struct Measurement {
  std::size_t candidate = 0;  // index into the list given to run_tuner
  Outcome outcome = Outcome::OverBudget;
  std::string error;               // why it failed
  std::string info;                // Timer::describe after prepare
  std::vector<double> timings_us;  // every timed run, in order
  double median_us = 0;            // of timings_us (Timed only)
};

struct Result {
  std::vector<Measurement> tried;  // the baseline first, then by predicted cost
  int best = -1;                   // index into tried: the lowest median; -1: none timed
  int baseline = -1;               // index into tried of the baseline, -1: none given
  double seconds = 0;
};

// The median of xs (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> xs);

// The candidates to try: the baseline (if any) and top_n others, as indices into `all`: the
// cheapest of each family first, by predicted cost (stable for equal costs), so that a cost
// model that misjudges a whole family (the wgmma path's forms) cannot keep it untimed while
// one family's variants fill the list; then the cheapest of the rest.
std::vector<std::size_t> shortlist(const std::vector<Candidate>& all, std::size_t top_n);

Result run_tuner(const std::vector<Candidate>& all, CandidateCompiler& compiler, Timer& timer,
                 const Settings& settings);

}  // namespace winnow::rt::tune
