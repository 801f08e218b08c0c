// Pieces every `winnow bench` workload shares: size lists, CUDA-event timing, and the
// JSON records of docs/performance.md (one object per line, on stdout and appended to --out).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda_driver.h"

namespace winnow::tools {

// "65536", "64K", "1M" (binary multiples); a list separated by commas. UsageError otherwise.
int64_t parse_size(const std::string& flag, const std::string& s);
std::vector<int64_t> parse_sizes(const std::string& flag, const std::string& list);
// The non-empty items of a list separated by `sep`.
std::vector<std::string> split_list(const std::string& s, char sep = ',');

// The number after "key": in a flat JSON object; nullopt when missing, null or not > 0.
std::optional<double> json_number(const std::string& text, const std::string& key);
// The whole of a small text file; nullopt (with a line on stderr naming `what` and the
// `fallback` taken) when it cannot be read.
std::optional<std::string> read_text(const std::string& path, const char* what,
                                     const char* fallback);
std::string json_string(const std::string& s);
std::string json_bool(std::optional<bool> b);
std::string utc_date();  // "2026-12-01"
// A record's "variant": `base` (e.g. "attention_wgmma", or empty), then WINNOW_NVRTC_OPTIONS
// (kernel switches such as -DWINNOW_GATE_REFRESH_TILES=8) when set, space-separated.
std::string variant_with_nvrtc_options(const std::string& base);
// Prints the records on stdout and appends them to out_path (when not empty).
void emit(const std::string& out_path, const std::vector<std::string>& lines);
double seconds_since(std::chrono::steady_clock::time_point t0);
size_t free_device_memory();  // bytes free on the current device now
// False, with the reason on stderr, when no GPU can run the benchmark.
bool bench_gpu_present();

// The ceilings ratios are taken against: docs/performance.md's published values for the
// GPU (published_ceilings), or those bench/ceilings.py measured on this machine (--ceilings).
struct Ceilings {
  double copy_tbps = 4.249, bf16_tflops = 757, fp8_tflops = 1352;
  int measured = 0;          // how many of the three came from the file
  const char* card = "H200";  // whose published values the others are
  const char* source() const {
    return measured == 3 ? "measured" : measured == 0 ? "published" : "mixed";
  }
};
// The published values of the GPU named (bench/ceilings.py on an H100 80GB HBM3 and on an
// H200, the files docs/performance.md cites); a name with neither gets the H200's.
Ceilings published_ceilings(const std::string& gpu);
// The published values of `gpu` where `path` is empty or lacks one (said on stderr).
Ceilings read_ceilings(const std::string& path, const std::string& gpu);
// "measured", or "published (H100)" / "mixed (H100)": where the ceilings came from.
std::string ceilings_text(const Ceilings& c);

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

// `warmup` untimed launches (and more until `warmup_ms` of them have run: the GPU then
// runs at the clocks it holds under this load), then `repeats` launches each between two
// CUDA events. Runs longer than a second are reported on stderr as they end, prefixed by
// `label`.
template <class Launch>
Timing time_launches(const Launch& launch, int warmup, int repeats,
                     const std::string& label = "winnow bench", double warmup_ms = 0) {
  const rt::DriverApi& cu = rt::driver();
  CUstream stream = nullptr;
  Event a, b;
  std::vector<float> times;
  if (warmup_ms > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < warmup_ms) {
      launch(stream);
      rt::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
    }
  }
  for (int i = 0; i < warmup + repeats; ++i) {
    rt::check(cu.cuEventRecord(a.get(), stream), "cuEventRecord");
    launch(stream);
    rt::check(cu.cuEventRecord(b.get(), stream), "cuEventRecord");
    rt::check(cu.cuEventSynchronize(b.get()), "cuEventSynchronize");
    float ms = 0;
    rt::check(cu.cuEventElapsedTime(&ms, a.get(), b.get()), "cuEventElapsedTime");
    if (ms > 1000)
      fmt::print(stderr, "{}: {} {}/{}: {:.2f} s\n", label, i < warmup ? "warm-up" : "run",
                 i < warmup ? i + 1 : i - warmup + 1, i < warmup ? warmup : repeats, ms / 1e3);
    if (i >= warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), times.back()};
}

}  // namespace winnow::tools
