// The CPU reference: scores in double from the dequantised inputs (independent of the
// generated code), and top-k in the order of DESIGN.md section 2.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/common/topk_op.h"

namespace winnow::ops {

// Host copies of one call's inputs, dequantised to float (exactly).
struct HostInputs {
  int64_t rows = 0, num_keys = 0;
  int heads = 1, dim = 0;
  std::vector<float> q;       // [rows][heads][dim]
  std::vector<float> k;       // [num_keys][dim]
  std::vector<float> w;       // [rows][heads], empty when the score does not read it
  std::vector<float> kscale;  // [num_keys], empty when unused
  std::vector<float> key_norms;  // [num_keys] |k|^2 as given to the kernel; empty: summed
  std::vector<int> window_start, window_end;  // [rows], for range windows
};

// A row's window [start, end); `bad` when it runs past num_keys (the output is all -1).
struct KeyWindow {
  int64_t start = 0, end = 0;
  bool bad = false;
  int64_t size() const { return end - start; }
};
KeyWindow row_window(const TopkProblem& p, const HostInputs& in, int64_t row);

// Keys visible to `rows` rows under a causal window of ratio m (row r at position
// offset + r sees t < (offset + r + 1) / m), in closed form: the FLOP count of causal
// workloads. Assumes no window runs past the keys (validation refuses those).
double causal_visible_pairs(int64_t causal_offset, int64_t rows, int causal_ratio);

// score(row, key) in double.
double reference_score(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key);

// score(row, key) for every key of [start, end), the row's q converted once (the same
// numbers as reference_score, fast enough for whole windows of a million-key sequence).
// With `magnitudes`, the scores reference_magnitude gives.
std::vector<double> reference_row_scores(const TopkProblem& p, const HostInputs& in, int64_t row,
                                         int64_t start, int64_t end, bool magnitudes = false);

// The score evaluated on magnitudes: |w|, |kscale| and dot(h) = sum_i |q_i k_i| (norms as
// they are). The scale of the rounding error of a score whose dots the hardware sums in
// its own order and precision: Hopper's fp8 wgmma accumulates with fewer bits than fp32
// (errors seen: about 5e-6 of this; bf16 / fp16 and mma.sync: fp32 rounding).
double reference_magnitude(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key);

// The most a device score of (row, key) may differ from `score` (the double reference):
// rel * max(1, |score|) plus kAccumulationError times the magnitude above.
inline constexpr double kAccumulationError = 1.0 / 16384;  // 2^-14
double score_tolerance(const TopkProblem& p, const HostInputs& in, int64_t row, int64_t key,
                       double score, double rel);

// The row's top k key indices (absolute), best first, by double scores.
std::vector<int64_t> reference_topk_row(const TopkProblem& p, const HostInputs& in, int64_t row);

// The exact top k of fp32 scores[start..end) (absolute indices, best first) with the
// device's rank order (templates/select/rank_order.cuh): the check of materialize + select.
std::vector<int64_t> select_topk_row(const float* scores, int64_t start, int64_t end, int k);

// True when `got` (absolute key indices, any order, distinct) is the row's top k up to
// accumulation error: as many keys as the reference picks, and every key the reference
// does not pick scores within score_tolerance (tol, and that of the k-th key) of the
// reference's k-th score (device and double scores may order near-ties differently).
bool near_reference_selection(const TopkProblem& p, const HostInputs& in, int64_t row,
                              const std::vector<int64_t>& got, double tol = 1e-3);

// True when one row of a fused result (k slots, -1 padding, indices relative to `base`)
// holds exactly the keys select_topk_row picks from scores[start..end): the exactness
// check of the demo, the benchmark and the tests.
bool same_selection(const int* fused_row, int k, int64_t base, const float* scores,
                    int64_t start, int64_t end);

}  // namespace winnow::ops
