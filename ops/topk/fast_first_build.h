// The fast first build (opt-in: WINNOW_FAST_FIRST_BUILD=1, NVRTC backend): when a plan's
// kernel is in no cache, NVRTC first compiles it with -Ofc=max -split-compile=0 (optimisation
// traded for compile time: a usable kernel in a fraction of the time, the same floating
// point, its own cache key since the options are in the key), and a background thread
// compiles the full build into the cache meanwhile. The op runs the first kernel until the
// full one is ready, then switches at its next execute outside stream capture (or when the
// caller asks: TopkOp::finish_build). The first kernel stays loaded for the op's life, so a
// CUDA graph captured with it keeps running.
#pragma once
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "compiler/backend/backend.h"
#include "ops/common/jit_module.h"

namespace winnow::ops {

// The options the first tier adds to a request's: NVRTC 13's -Ofc=max (a fraction of the
// cold build's time; ptxas then serialises wgmma and spills) and -split-compile=0 (ptxas on
// every hardware thread: less than half the time for relu_mh on a many-core machine).
// The catch of the split: its ptxas
// threads print their performance notes (C7520, "wgmma.mma_async instructions are
// serialized") on the process's stderr instead of NVRTC's log, and no option of NVRTC's or
// ptxas's silences them; the first tier is opt-in and docs/environment.md says so.
const std::vector<std::string>& fast_first_options();

// True when WINNOW_FAST_FIRST_BUILD is "1" and `be` is NVRTC (the options are NVRTC's).
bool fast_first_wanted(const backend::Backend& be);

// `req` with fast_first_options() added (sorted, as extra_compiler_options are).
backend::CompileRequest fast_first_request(backend::CompileRequest req);

// compile_cached on a background thread: started at construction, joined at destruction
// (an NVRTC compile cannot be interrupted: destruction waits for it). The cache and the
// backend must outlive it. The thread runs kBackgroundNice above its creator's nice value:
// the first tier, compiling at the same time, gets the cores first.
inline constexpr int kBackgroundNice = 10;
class BackgroundBuild {
 public:
  BackgroundBuild(rt::CubinCache& cache, const backend::Backend& be, backend::CompileRequest req,
                  std::string stem, std::string program, std::string description);
  ~BackgroundBuild();
  BackgroundBuild(const BackgroundBuild&) = delete;
  BackgroundBuild& operator=(const BackgroundBuild&) = delete;

  // The compile has ended (successfully or not); never blocks.
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits for the compile: its module, or nullopt when it failed (logged as a warning).
  const std::optional<CompiledModule>& wait();
  double seconds() const { return seconds_; }  // the compile's wall time (after done)

 private:
  std::optional<CompiledModule> module_;
  double seconds_ = 0;
  std::atomic<bool> done_{false};
  std::mutex join_mu_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace winnow::ops
