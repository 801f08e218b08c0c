// Runs a topk op on host data: upload, execute, download. Used by `winnow demo`, the
// benchmark and the [gpu] tests (never by the execute path, which never allocates).
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "testing/host_data.h"
#include "testing/reference.h"
#include "ops/topk/stream_topk.h"
#include "ops/common/topk_op.h"

namespace winnow::ops {

struct ProblemData {
  int64_t rows = 0, num_keys = 0;
  HostTensor q, k;
  std::vector<float> w, kscale;
  std::vector<float> key_norms;  // optional: the key_norms input (empty: the kernel sums)
  std::vector<int> window_start, window_end;
  std::vector<int> sample_hint;  // optional: the sample hint input (empty: none)
  HostInputs host(const TopkProblem& p) const;  // the dequantised view for the reference
};

struct DataOptions {
  int levels = 0;            // > 0: integer values in [-levels/2, levels/2] (heavy ties)
  double nan_fraction = 0;   // share of keys whose first element is NaN
  double inf_fraction = 0;   // share of kscale entries set to +inf (or keys, without kscale)
  // Scores that read ksq: the key_norms input given, each key's |k|^2 times a random factor
  // in [0.5, 2) (a kernel that summed the squares instead would rank differently), integers
  // with `levels`, NaN / +inf at the fractions above.
  bool key_norms = false;
};

// Random inputs for problem p (every input the score reads; windows for Ranges are
// random and not tile-aligned, including empty ones).
ProblemData random_problem(const TopkProblem& p, int64_t rows, int64_t num_keys,
                           std::mt19937_64& rng, const DataOptions& opt = {});

// A device copy of v (at least 16 bytes, so that an empty input still has an address).
template <class T>
rt::DeviceBuffer upload(const std::vector<T>& v) {
  rt::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

struct RunResult {
  std::vector<int> indices;   // [rows, k] (top-k mode)
  std::vector<float> scores;  // [rows, k] or [rows, num_keys]
  uint32_t fallback_rows = 0, bad_windows = 0;
  float ms_median = 0, ms_min = 0, ms_max = 0;  // when timed (repeats > 0)
  // When timed: the host time of the execute call itself (validation, parameters, launch
  // enqueue; not the kernel), median over the repeats, in microseconds.
  float host_us_median = 0;
};

// Executes once (and `repeats` more times for timing, with CUDA events) on the device.
// scores false: the top-k call asks for indices only (RunResult::scores stays empty).
RunResult run_on_device(const TopkOp& op, const rt::Context& ctx, const ProblemData& data,
                        int repeats = 0, bool scores = true);
// The same through the streaming driver (data.sample_hint: the first chunk's hint).
RunResult run_on_device(const StreamTopk& op, const rt::Context& ctx, const ProblemData& data,
                        int repeats = 0);

}  // namespace winnow::ops
