#include "runtime/tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

namespace winnow::rt::tune {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Timed: return "timed";
    case Outcome::CompileFailed: return "compile failed";
    case Outcome::LaunchFailed: return "launch failed";
    case Outcome::OverBudget: return "over budget";
    case Outcome::Dropped: return "dropped (slow)";
  }
  return "?";
}

double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

std::vector<std::size_t> shortlist(const std::vector<Candidate>& all, std::size_t top_n) {
  std::vector<std::size_t> order(all.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (all[a].baseline != all[b].baseline) return all[a].baseline;
    return all[a].predicted_us < all[b].predicted_us;
  });
  std::vector<std::size_t> out;
  std::vector<bool> taken(all.size(), false);
  std::set<std::string> families;
  std::size_t others = 0;
  for (std::size_t i : order) {  // the baseline, then one of each family
    const bool first_of_family = all[i].family.empty() || families.insert(all[i].family).second;
    if (all[i].baseline || (first_of_family && others < top_n)) {
      out.push_back(i);
      taken[i] = true;
      others += !all[i].baseline;
    }
  }
  for (std::size_t i : order) {  // then the cheapest of the rest
    if (others >= top_n) break;
    if (!taken[i]) {
      out.push_back(i);
      ++others;
    }
  }
  // Tried in the order of the list given: the baseline first, then by predicted cost.
  std::stable_sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
    if (all[a].baseline != all[b].baseline) return bool(all[a].baseline);
    return all[a].predicted_us < all[b].predicted_us;
  });
  return out;
}

namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Seconds a candidate's runs are expected to take: the baseline's median per run (0 while
// it is not timed).
double expected_s(const Result& r, const Settings& settings) {
  if (r.baseline < 0) return 0;
  const Measurement& b = r.tried[std::size_t(r.baseline)];
  if (b.outcome != Outcome::Timed) return 0;
  return double(settings.warmup + settings.repeats) * b.median_us * 1e-6;
}

}  // namespace

Result run_tuner(const std::vector<Candidate>& all, CandidateCompiler& compiler, Timer& timer,
                 const Settings& settings) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  Result r;
  const std::vector<std::size_t> picked = shortlist(all, settings.top_n);
  r.tried.resize(picked.size());
  for (std::size_t j = 0; j < picked.size(); ++j) {
    r.tried[j].candidate = picked[j];
    if (all[picked[j]].baseline) r.baseline = int(j);
  }
  const std::size_t total = 2 * picked.size();  // compile + time steps, for the progress line
  std::atomic<std::size_t> done{0};
  std::mutex progress_mu;
  const auto report = [&] {
    const std::size_t d = ++done;
    if (!settings.progress) return;
    std::lock_guard<std::mutex> lock(progress_mu);
    settings.progress(d, total, elapsed());
  };

  // Compiles: independent, so as many at once as the host has cores.
  std::vector<std::exception_ptr> compile_error(picked.size());
  unsigned threads = settings.compile_threads ? settings.compile_threads
                                              : std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::min<std::size_t>(threads, std::max<std::size_t>(picked.size(), 1)));
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    for (std::size_t j; (j = next++) < picked.size();) {
      try {
        compiler.compile(picked[j]);
      } catch (...) {
        compile_error[j] = std::current_exception();
      }
      report();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  // Timings: one candidate at a time, so they do not share the device.
  for (std::size_t j = 0; j < picked.size(); ++j) {
    Measurement& m = r.tried[j];
    if (compile_error[j]) {
      m.outcome = Outcome::CompileFailed;
      m.error = what_of(compile_error[j]);
    } else if (!all[m.candidate].baseline &&
               elapsed() + expected_s(r, settings) > settings.budget_s) {
      m.outcome = Outcome::OverBudget;  // it would not finish within the budget
    } else {
      try {
        timer.prepare(m.candidate);
        m.info = timer.describe(m.candidate);
        // The baseline is timed first (the shortlist puts it there): past drop_ratio x its
        // median in two warm-up runs in a row, a candidate is dropped.
        const bool baseline_timed = r.baseline >= 0 && r.tried[std::size_t(r.baseline)].outcome == Outcome::Timed;
        const double limit = settings.drop_ratio > 0 && baseline_timed && !all[m.candidate].baseline
                                 ? settings.drop_ratio * r.tried[std::size_t(r.baseline)].median_us
                                 : 0;
        // Every run, warm-up first. A candidate other than the baseline stops before a run
        // that its last one says would end past the budget (over budget: its runs so far
        // kept), and after two runs in a row past the limit (dropped).
        const bool baseline = all[m.candidate].baseline;
        std::vector<double> runs;
        m.outcome = Outcome::Timed;
        for (int i = 0; i < settings.warmup + settings.repeats; ++i) {
          if (!baseline && !runs.empty() && elapsed() + runs.back() * 1e-6 > settings.budget_s) {
            m.outcome = Outcome::OverBudget;
            break;
          }
          runs.push_back(timer.run_us(m.candidate));
          const std::size_t n = runs.size();
          if (limit > 0 && n >= 2 && runs[n - 2] > limit && runs[n - 1] > limit) {
            m.outcome = Outcome::Dropped;
            break;
          }
        }
        const std::size_t warm = std::min(runs.size(), std::size_t(std::max(settings.warmup, 0)));
        if (m.outcome == Outcome::Timed) {
          m.timings_us.assign(runs.begin() + std::ptrdiff_t(warm), runs.end());
        } else {
          m.timings_us = runs;  // it cannot win: what it ran, warm-up included
        }
        m.median_us = median(m.timings_us);
      } catch (...) {
        m.outcome = Outcome::LaunchFailed;
        m.error = what_of(std::current_exception());
      }
      timer.release(m.candidate);
    }
    if (m.outcome == Outcome::Timed && m.timings_us.empty()) {
      m.outcome = Outcome::LaunchFailed;
      m.error = "no timed runs (repeats = 0)";
    }
    if (m.outcome == Outcome::Timed &&
        (r.best < 0 || m.median_us < r.tried[std::size_t(r.best)].median_us))
      r.best = int(j);
    report();
  }
  r.seconds = elapsed();
  return r;
}

}  // namespace winnow::rt::tune
