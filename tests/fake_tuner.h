// Test machinery for the tuner (runtime/tuner.h): a compiler and a timer with no device.
// Each candidate's time comes from a table, compiles and launches fail where told, and
// every call is counted, so the tests see what the tuner did.
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/tuner.h"

namespace winnow::test {

class FakeCompiler : public rt::tune::CandidateCompiler {
 public:
  std::set<std::size_t> fail;      // these throw "fake compile error"
  int sleep_ms = 0;                // each compile takes this long (to see overlap)
  std::atomic<int> running{0}, most_at_once{0}, calls{0};
  std::mutex mu;
  std::set<std::size_t> compiled;

  void compile(std::size_t i) override {
    const int now = ++running;
    for (int m = most_at_once; now > m && !most_at_once.compare_exchange_weak(m, now);) {
    }
    ++calls;
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    --running;
    if (fail.count(i)) throw std::runtime_error("fake compile error " + std::to_string(i));
    std::lock_guard<std::mutex> lock(mu);
    compiled.insert(i);
  }
};

class FakeTimer : public rt::tune::Timer {
 public:
  // Candidate i's runs take times[i][run % size] microseconds.
  std::map<std::size_t, std::vector<double>> times;
  std::set<std::size_t> fail_prepare, fail_run;
  std::map<std::size_t, int> runs;  // run_us calls per candidate (warm-up included)
  std::vector<std::size_t> prepared, released;
  bool sleep = false;  // each run also takes its time on the wall clock (budget tests)

  void prepare(std::size_t i) override {
    prepared.push_back(i);
    if (fail_prepare.count(i)) throw std::runtime_error("fake launch refused " + std::to_string(i));
  }
  double run_us(std::size_t i) override {
    const int r = runs[i]++;
    if (fail_run.count(i)) throw std::runtime_error("fake launch error " + std::to_string(i));
    const std::vector<double>& t = times.at(i);
    const double us = t[std::size_t(r) % t.size()];
    if (sleep) std::this_thread::sleep_for(std::chrono::microseconds(int64_t(us)));
    return us;
  }
  void release(std::size_t i) override { released.push_back(i); }
  std::string describe(std::size_t i) override { return "fake launch " + std::to_string(i); }
};

}  // namespace winnow::test
