// The topk op's tunable space: every knob the tuner may turn, its values and
// its hard limits, in one place. A point that breaks a limit is pruned here and never
// compiled: the same validate_problem a caller's problem passes, and the same choose_plan
// (SmemLayout arithmetic against the device's shared memory) that builds the plan.
//
// Knobs and values:
//   rows_per_cta        1, 2, 4, 8, 16      query rows sharing each key tile
//   key_tile            16, 32, 64, 128     keys per tile (128: tensor cores only)
//   bins                512, 1024, 2048     ThresholdBins per row
//   sample_size         default, 2 max(2048, k)   keys scored first (<= WINNOW_MAX_SAMPLE_SIZE)
//   candidate_capacity  default, 2 default  CandidateBuffer entries per row (>= k)
//   key_splits          per call, 1, 4      parts each row's window is cut into
//   max_ctas_per_sm     as fit, 1, 2        a cap on resident CTAs per SM
//   pipeline            heuristic, 1        the wgmma path's form (PlanKnobs::pipeline: the
//                                           pipelined form); only where the problem's plan
//                                           is on wgmma
// Key-tile stages of the topk kernel are fixed by its configuration (SmemLayout::k_stages:
// 4 or 3 on wgmma, 2 on mma.sync, 1 on CUDA cores).
// Registers are a limit known only after the compile: a point that cannot be resident is
// refused by TopkOp::build and recorded by the tuner as failed to launch.
// Problems in the retrieval mode (ops/common/knn_retrieval.h) have their own plan (plan::KnnKnobs):
//   stages              2..8                key-chunk ring stages (KnnStreamSmem must fit)
//   candidate_capacity  default (4 max(k, 1024)), twice: each query's list
//   sample_size         default (16 N / max(k, 1024)), at least 16384, the most (63360)
//   max_ctas_per_sm     default (1: the persistent stream), 2 (where two fit)
// and the other knobs stay the problem's. The cost model below knows the topk kernel only:
// retrieval points are ranked equal, each knob alone first, then the combinations.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/common/topk_op.h"

namespace winnow::ops {

// One point. The problem's own values (0 / -1: the heuristic's) make the baseline.
struct TopkPoint {
  int rows_per_cta = 0, key_tile = 0, bins = 0;
  int sample_size = -1, candidate_capacity = 0, key_splits = 0, max_ctas_per_sm = 0;
  int stages = 0;    // the retrieval mode's ring stages
  int pipeline = 0;  // the wgmma path's form (0: the heuristic's)
  // "rows_per_cta=2 key_tile=128 bins=2048 sample_size=-1 candidate_capacity=0
  // key_splits=0 max_ctas_per_sm=0 stages=0 pipeline=0": what the tuning database records
  // (a text without pipeline=, as recorded before the knob, reads as pipeline=0).
  std::string text() const;
  bool operator==(const TopkPoint&) const = default;
};
// The point a text of TopkPoint::text() names; nullopt for anything else.
std::optional<TopkPoint> parse_topk_point(const std::string& text);
// `base` with the knobs a text of NAME=VALUE words names (any subset of text()'s); nullopt,
// with the reason in *why, for an unknown knob or a malformed text. The values are checked
// where the point is built (validate_problem, choose_plan), as a tuned point's are.
std::optional<TopkPoint> point_with_knobs(TopkPoint base, const std::string& text,
                                          std::string* why);

// The problem's own knobs as a point (the heuristic plan's, unless the caller set some).
TopkPoint point_of(const TopkProblem& p);
// The problem with the point's knobs in place of its own.
TopkProblem with_point(TopkProblem p, const TopkPoint& point);

// The shape a plan is tuned for: rows per call and keys (the K tensor's rows). A causal
// window's rows are the last `rows` positions of a sequence of num_keys x causal_ratio
// (causal_offset = num_keys x ratio - rows: a prefill's chunk that ends the sequence).
struct TopkShape {
  int64_t rows = 0;
  int64_t num_keys = 0;
};
// The keys each row's window holds on average: num_keys, or the causal rows' mean.
int64_t mean_window_keys(const TopkProblem& p, const TopkShape& shape);
// The causal offset of TopkShape's rule (0 for other windows).
int64_t shape_causal_offset(const TopkProblem& p, const TopkShape& shape);

// The device the cost model sees: the context's, or an H200's without one.
struct DeviceModel {
  int sm_count = 132;
  long smem_per_sm = 228 * 1024;
  double hbm_bytes_per_s = 4.8e12;
  double l2_bytes_per_s = 12e12;
  double tensor_flop_per_s = 990e12;  // dense bf16 wgmma; fp8 twice, mma.sync half
  double cuda_core_flop_per_s = 60e12;
};
DeviceModel device_model(const rt::Context* ctx);

// The analytic cost model, in microseconds; it only ranks points, so its constants need
// be right in proportion, not in absolute. With B = ceil(rows / rows_per_cta) row blocks
// of S key splits and the window's N keys (mean_window_keys) of d elements of b bytes:
//   memory   N d b / HBM + B N d b / L2       (each row block streams the keys from L2)
//   math     2 rows H d (N + sample) / rate   (tensor cores or CUDA cores, as planned)
//   epilogue rows N (H, or H / 16 with head sums) / CUDA-core rate
//   select   rows (bins + capacity) x 4 bytes / L2, and rows k S x 8 bytes / HBM to merge
// over the waves of the persistent grid: resident = min(cap, smem_per_sm / (smem + 1 KiB),
// 2048 / threads) x SMs; utilisation = (B S) / (ceil(B S / resident) resident), and
//   time = max(memory, math + epilogue) / utilisation + select.
// It knows nothing of the wgmma path's forms (which overlap the epilogue with the MMAs in
// other ways): the shortlist's families (TopkCandidate::family) get them timed.
double topk_cost_us(const TopkProblem& p, const plan::KernelPlan& plan, const TopkPoint& point,
                    const TopkShape& shape, const DeviceModel& device);

struct TopkCandidate {
  TopkPoint point;
  double predicted_us = 0;
  bool baseline = false;  // the problem's own point (the heuristic plan)
  std::string plan_text;  // TopkOp::plan_text of the point's op
  // The kernel's structure (rows per CTA, key tile, the wgmma path's form): the tuner's
  // shortlist times the cheapest point of each family before a second of any.
  std::string family;
};

struct TopkSpace {
  std::vector<TopkCandidate> candidates;  // the baseline first, then the valid points
  std::size_t considered = 0;             // points of the grid
  std::size_t pruned = 0;                 // broke a limit
  std::size_t duplicates = 0;             // the same plan and launch as an earlier point
  std::string first_pruned_reason;        // an example, for `winnow tune`
  bool retrieval_mode = false;            // the baseline runs the retrieval mode
};

// Why `point` cannot run for `p` on ctx's device (null: the problem's arch, the default
// shared-memory limit); "" when it can.
std::string topk_point_refusal(const TopkProblem& p, const TopkPoint& point,
                               const rt::Context* ctx);

// The grid above, pruned by the limits, deduplicated and costed for `shape`.
TopkSpace topk_space(const TopkProblem& p, const rt::Context* ctx, const TopkShape& shape);

}  // namespace winnow::ops
