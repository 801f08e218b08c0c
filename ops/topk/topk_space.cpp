#include "ops/topk/topk_space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "ops/common/validate.h"
#include "runtime/knob_text.h"
#include "knn/knn_workspace.cuh"

namespace winnow::ops {

std::string TopkPoint::text() const {
  return fmt::format("rows_per_cta={} key_tile={} bins={} sample_size={} candidate_capacity={} "
                     "key_splits={} max_ctas_per_sm={} stages={} pipeline={}",
                     rows_per_cta, key_tile, bins, sample_size, candidate_capacity, key_splits,
                     max_ctas_per_sm, stages, pipeline);
}

namespace {
// The point's field a knob names; nullptr for an unknown name.
int* knob_field(TopkPoint& p, const std::string& name) {
  return name == "rows_per_cta"         ? &p.rows_per_cta
         : name == "key_tile"           ? &p.key_tile
         : name == "bins"               ? &p.bins
         : name == "sample_size"        ? &p.sample_size
         : name == "candidate_capacity" ? &p.candidate_capacity
         : name == "key_splits"         ? &p.key_splits
         : name == "max_ctas_per_sm"    ? &p.max_ctas_per_sm
         : name == "stages"             ? &p.stages
         : name == "pipeline"           ? &p.pipeline
                                        : nullptr;
}
}  // namespace

std::optional<TopkPoint> parse_topk_point(const std::string& text) {
  const auto knobs = rt::parse_knob_text(text);
  if (!knobs) return std::nullopt;
  TopkPoint p;
  for (const auto& [name, value] : *knobs) {
    int* field = knob_field(p, name);
    if (field == nullptr) return std::nullopt;
    *field = value;
  }
  // Every knob once; pipeline= may be missing (records from before it: 0).
  if (knobs->size() != 9 && (knobs->size() != 8 || knobs->count("pipeline"))) return std::nullopt;
  // pipeline=2 named the filter-warpgroup form, removed (docs/decisions/0040): such a record
  // is no point of this build, and the lookup passes over it.
  if (p.pipeline < 0 || p.pipeline > 1) return std::nullopt;
  return p;
}

std::optional<TopkPoint> point_with_knobs(TopkPoint base, const std::string& text,
                                          std::string* why) {
  const auto knobs = rt::parse_knob_text(text);
  if (!knobs || knobs->empty()) {
    *why = fmt::format("'{}' is not a list of NAME=VALUE knobs", text);
    return std::nullopt;
  }
  for (const auto& [name, value] : *knobs) {
    int* field = knob_field(base, name);
    if (field == nullptr) {
      *why = fmt::format("no knob '{}' (the knobs: {})", name, TopkPoint{}.text());
      return std::nullopt;
    }
    *field = value;
  }
  return base;
}

TopkPoint point_of(const TopkProblem& p) {
  TopkPoint t;
  t.rows_per_cta = p.plan_knobs.rows_per_cta;
  t.key_tile = p.plan_knobs.key_tile;
  t.bins = p.plan_knobs.bins;
  t.sample_size = p.sample_size;
  t.candidate_capacity = p.candidate_capacity;
  t.key_splits = p.key_splits;
  t.max_ctas_per_sm = p.max_ctas_per_sm;
  t.stages = p.plan_knobs.stages;
  t.pipeline = p.plan_knobs.pipeline;
  return t;
}

TopkProblem with_point(TopkProblem p, const TopkPoint& t) {
  p.plan_knobs.rows_per_cta = t.rows_per_cta;
  p.plan_knobs.key_tile = t.key_tile;
  p.plan_knobs.bins = t.bins;
  p.sample_size = t.sample_size;
  p.candidate_capacity = t.candidate_capacity;
  p.key_splits = t.key_splits;
  p.max_ctas_per_sm = t.max_ctas_per_sm;
  p.plan_knobs.stages = t.stages;
  p.plan_knobs.pipeline = t.pipeline;
  return p;
}

int64_t shape_causal_offset(const TopkProblem& p, const TopkShape& shape) {
  if (p.window != WindowKind::Causal) return 0;
  return std::max<int64_t>(0, shape.num_keys * p.causal_ratio - shape.rows);
}

int64_t mean_window_keys(const TopkProblem& p, const TopkShape& shape) {
  if (p.window != WindowKind::Causal || shape.rows == 0) return shape.num_keys;
  const int64_t offset = shape_causal_offset(p, shape);
  const int64_t first = std::min(shape.num_keys, (offset + 1) / p.causal_ratio);
  const int64_t last = std::min(shape.num_keys, (offset + shape.rows) / p.causal_ratio);
  return (first + last) / 2;
}

DeviceModel device_model(const rt::Context* ctx) {
  DeviceModel d;
  if (ctx) {
    d.sm_count = ctx->info().sm_count;
    d.smem_per_sm = std::max<long>(ctx->info().max_smem_optin, 1024);
  }
  return d;
}

double topk_cost_us(const TopkProblem& p, const plan::KernelPlan& plan, const TopkPoint& point,
                    const TopkShape& shape, const DeviceModel& dev) {
  const double rows = double(std::max<int64_t>(shape.rows, 1));
  const double n = double(std::max<int64_t>(mean_window_keys(p, shape), 1));
  const double d = p.head_dim, h = p.heads, b = dtype_bytes(p.k_dtype);
  const double blocks = std::ceil(rows / plan.rows_per_cta);
  const double memory = n * d * b / dev.hbm_bytes_per_s + blocks * n * d * b / dev.l2_bytes_per_s;
  double rate = dev.cuda_core_flop_per_s;
  if (plan.mma != 0) {
    rate = dev.tensor_flop_per_s * (plan.mma == int(plan::ElemType::E4M3) ? 2 : 1);
    if (!plan.wgmma) rate /= 2;
  }
  const double math = 2 * rows * h * d * (n + plan.sample) / rate;
  const double epilogue = rows * n * (plan.head_sums ? std::max(h / 16, 1.0) : h) /
                          dev.cuda_core_flop_per_s;
  // Key splits as execute would choose them (TopkOp::key_splits_for without the device's
  // cap): parts of at least four tiles and 2k keys.
  double splits = point.key_splits;
  if (splits == 0) {
    const double min_part = std::max(4.0 * plan.key_tile, 2.0 * p.k);
    splits = std::max(1.0, std::floor(n / min_part));
  }
  const long per_cta_smem = plan.smem_bytes() + 1024;
  long per_sm = std::min<long>(dev.smem_per_sm / std::max<long>(per_cta_smem, 1),
                               2048 / std::max(plan.threads, 1));
  if (point.max_ctas_per_sm > 0) per_sm = std::min<long>(per_sm, point.max_ctas_per_sm);
  const double resident = double(std::max<long>(per_sm, 1)) * dev.sm_count;
  // Splits beyond what fills the grid are not taken (TopkOp::key_splits_for).
  splits = std::max(1.0, std::min(splits, std::floor(resident / blocks)));
  const double items = blocks * splits;
  const double utilisation = items / (std::ceil(items / resident) * resident);
  const double select = rows * (plan.bins + plan.capacity) * 4.0 / dev.l2_bytes_per_s +
                        (splits > 1 ? rows * p.k * splits * 8.0 / dev.hbm_bytes_per_s : 0);
  return (std::max(memory, math + epilogue) / utilisation + select) * 1e6;
}

namespace {

// The point's op, or null with `why`.
std::unique_ptr<TopkOp> point_op(const TopkProblem& p, const TopkPoint& point,
                                 const rt::Context* ctx, std::string* why) {
  // A candidate buffer smaller than k would take the fallback on every row.
  const int capacity = point.candidate_capacity > 0 ? point.candidate_capacity
                                                    : std::max(4 * p.k, 4096);
  if (p.mode == Mode::TopK && capacity < p.k) {
    *why = fmt::format("candidate_capacity = {} is below k = {}", capacity, p.k);
    return nullptr;
  }
  try {
    // create validates the problem (every field's limit) and chooses the plan with the
    // point's knobs against the device's shared memory: the same path a build takes.
    return TopkOp::create(with_point(p, point), ctx);
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
}

}  // namespace

std::string topk_point_refusal(const TopkProblem& p, const TopkPoint& point,
                               const rt::Context* ctx) {
  std::string why;
  point_op(p, point, ctx, &why);
  return why;
}

TopkSpace topk_space(const TopkProblem& p, const rt::Context* ctx, const TopkShape& shape) {
  TopkSpace space;
  const DeviceModel dev = device_model(ctx);
  std::set<std::string> seen;
  bool base_wgmma = false;
  const auto add = [&](const TopkPoint& point, bool baseline) {
    if (!baseline) ++space.considered;
    std::string why;
    std::unique_ptr<TopkOp> op = point_op(p, point, ctx, &why);
    if (!op) {
      if (baseline) throw NotSupported(why);  // the caller's own problem: create failed too
      if (space.pruned++ == 0) space.first_pruned_reason = point.text() + ": " + why;
      return;
    }
    // What the build and the launch would differ in: the plan and the two launch knobs.
    const std::string identity = op->plan_text() + fmt::format("splits={} ctas={}",
                                                               point.key_splits,
                                                               point.max_ctas_per_sm);
    if (!seen.insert(identity).second) {
      ++space.duplicates;
      return;
    }
    if (baseline) {
      space.retrieval_mode = op->retrieval_mode();
      base_wgmma = op->kernel_plan().wgmma;
    }
    TopkCandidate c;
    c.point = point;
    c.baseline = baseline;
    c.plan_text = op->plan_text();
    const plan::KernelPlan& kp = op->kernel_plan();
    c.family = fmt::format("rows={} tile={} wgmma={} pipelined={}", kp.rows_per_cta,
                           kp.key_tile, kp.wgmma, kp.pipelined);
    c.predicted_us = topk_cost_us(p, op->kernel_plan(), point, shape, dev);
    space.candidates.push_back(std::move(c));
  };
  const TopkPoint base = point_of(p);
  add(base, true);
  if (p.mode != Mode::TopK) return space;
  if (space.retrieval_mode) {
    // No cost model ranks these (all predicted equal, so the shortlist keeps this order):
    // each knob alone first, around the heuristic's plan, then their combinations.
    // Capacity and sample only upward (knn_plan.h: less of either takes exactness margin).
    const std::vector<int> capacities = {0, 2 * winnow::knn_capacity(p.k)};
    const std::vector<int> samples = {-1, 16384, winnow::kKnnMaxSampleCap};
    const auto point_with = [&](int stages, int capacity, int sample, int ctas) {
      TopkPoint point = base;
      point.stages = stages;
      point.candidate_capacity = capacity;
      point.sample_size = sample;
      point.max_ctas_per_sm = ctas;
      return point;
    };
    for (int stages = 2; stages <= 8; ++stages) add(point_with(stages, 0, -1, 0), false);
    for (int capacity : capacities) add(point_with(0, capacity, -1, 0), false);
    for (int sample : samples) add(point_with(0, 0, sample, 0), false);
    add(point_with(0, 0, -1, 2), false);
    for (int stages : {0, 2, 3, 4, 5, 6, 7, 8})
      for (int capacity : capacities)
        for (int sample : samples)
          for (int ctas : {0, 2}) add(point_with(stages, capacity, sample, ctas), false);
    return space;
  }

  const int default_capacity = std::max(4 * p.k, 4096);
  const std::vector<int> samples = {-1, std::min(2 * std::max(2048, p.k), kMaxSampleSize)};
  const std::vector<int> capacities = {0, std::min(2 * default_capacity, kMaxCandidateCapacity)};
  // The wgmma path's pipelined form only where the problem's own plan is on wgmma
  // (elsewhere the knob changes nothing).
  const std::vector<int> forms = base_wgmma ? std::vector<int>{0, 1} : std::vector<int>{0};
  for (int rows : {1, 2, 4, 8, 16})
    for (int form : forms)
      for (int tile : {16, 32, 64, 128})
        for (int bins : {512, 1024, 2048})
          for (int sample : samples)
            for (int capacity : capacities)
              for (int splits : {0, 1, 4})
                for (int ctas : {0, 1, 2})
                  add(TopkPoint{rows, tile, bins, sample, capacity, splits, ctas, 0, form}, false);
  return space;
}

}  // namespace winnow::ops
