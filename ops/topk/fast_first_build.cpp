#include "ops/topk/fast_first_build.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "runtime/env.h"
#include "runtime/log.h"

namespace winnow::ops {

const std::vector<std::string>& fast_first_options() {
  static const std::vector<std::string> options{"-Ofc=max", "-split-compile=0"};
  return options;
}

bool fast_first_wanted(const backend::Backend& be) {
  const auto v = rt::env_get("WINNOW_FAST_FIRST_BUILD");
  return v && *v == "1" && be.name() == "nvrtc";
}

backend::CompileRequest fast_first_request(backend::CompileRequest req) {
  for (const std::string& o : fast_first_options())
    if (std::find(req.options.begin(), req.options.end(), o) == req.options.end()) req.options.push_back(o);
  std::sort(req.options.begin(), req.options.end());
  return req;
}

BackgroundBuild::BackgroundBuild(rt::CubinCache& cache, const backend::Backend& be,
                                 backend::CompileRequest req, std::string stem, std::string program,
                                 std::string description)
    : thread_([this, &cache, &be, req = std::move(req), stem = std::move(stem),
               program = std::move(program), description = std::move(description)]() mutable {
        const auto t0 = std::chrono::steady_clock::now();
        // The first tier (on the caller's thread, ptxas on every core) is what the caller
        // waits for: this thread, and any thread the compiler starts from it, yields to it.
        // Linux's nice value is per thread and inherited by the threads it creates; a
        // refusal leaves the priority as it was.
        const auto tid = static_cast<id_t>(syscall(SYS_gettid));
        errno = 0;
        const int nice_now = getpriority(PRIO_PROCESS, tid);
        if (errno == 0) (void)setpriority(PRIO_PROCESS, tid, std::min(19, nice_now + kBackgroundNice));
        try {
          module_ = compile_cached(cache, be, std::move(req), stem, program, description);
        } catch (const std::exception& e) {
          rt::log(rt::LogLevel::Warn,
                  fmt::format("the full build of {} failed ({}); the fast first build stays", stem, e.what()));
        }
        seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        done_.store(true, std::memory_order_release);
      }) {}

BackgroundBuild::~BackgroundBuild() { wait(); }

const std::optional<CompiledModule>& BackgroundBuild::wait() {
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
  return module_;
}

}  // namespace winnow::ops
