// The fused top-k kernel's sm_90a path run on the CPU (tests/emu/cuda_emulation.h): the
// producer warp's TMA loads and cp.async gathers into the mbarrier ring, the math
// warpgroups' wgmma head sums from the accumulators, the sample, the gate, the candidate
// buffers, the exact fallback and the select, with the planner's own constants. The
// fused result must equal the emulated materialize kernel's scores + an exact select bit
// for bit, and the CPU double reference within the accumulation tolerance: the same
// checks as the [gpu] cases (tests/topk_check.h), before any GPU run. Tiny shapes (the
// emulation runs one std::thread per CUDA thread): a few seconds per case.
// The emulation has no __match_any_sync over a partial warp: the radix select's plain
// per-key counts (the switch's other side, same selection) stand in for it here.
#define WINNOW_RADIX_AGGREGATE 0

#include <cstring>

#include "ops/topk.h"
#include "topk_check.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "winnow/topk_kernel.cuh"

using namespace winnow;

namespace {

// The generated stub's config for relu_mh, 64 heads, d = 128, fp8 q and k, on sm_90a
// (compiler/codegen/emit_cuda.cpp prints the same constants; run_emulated checks them
// against the planner's).
template <int K, int CAP, int SAMPLE, bool MAT, int WINDOW>
struct EmuReluConfig {
  static constexpr int kHeads = 64, kDim = 128;
  static constexpr int kQElem = kElemE4M3, kKElem = kElemE4M3;
  static constexpr bool kMaterialize = MAT;
  static constexpr int kTopK = K;
  static constexpr int kWindow = WINDOW;
  static constexpr bool kSorted = false, kAbsolute = false;
  static constexpr bool kUsesW = true, kUsesKScale = true, kUsesQSq = false, kUsesKSq = false;
  static constexpr int kRows = 2, kKeyTile = 128, kThreads = 288, kMathThreads = 256;
  static constexpr int kBins = 2048, kCapacity = CAP, kSample = SAMPLE;
  static constexpr int kMma = kElemE4M3;
  static constexpr bool kHeadSums = true, kWgmma = true;
};

// The functor emit_score_functor prints for relu_mh with the key scale (checked below).
struct EmuReluScore {
  static float reduce0(const ScoreArgs& a) {
    float acc = op_mul(a.w[0], op_relu(a.dot[0]));
    for (int h = 1; h < 64; ++h) acc = op_add(acc, op_mul(a.w[h], op_relu(a.dot[h])));
    return acc;
  }
  static float eval(const ScoreArgs& a) { return op_mul(reduce0(a), a.kscale); }
  static constexpr bool kHeadSum = true;
  static float term(float dot, float w, float) { return op_mul(w, op_relu(dot)); }
  static constexpr bool kWeightedTerm = true;
  static constexpr bool kReluOfDot = true;
  static float unweighted(float dot, float) { return op_relu(dot); }
  static float post(float hsum, const ScoreArgs& a) { return op_mul(hsum, a.kscale); }
};

ops::TopkProblem emu_problem(int k, int capacity, int sample, ops::WindowKind window) {
  ops::TopkProblem p = test::relu_mh_problem(64, k, ops::DType::E4M3);
  p.arch = backend::parse_arch("sm_90a");
  p.candidate_capacity = capacity;
  p.sample_size = sample;
  p.window = window;
  p.key_splits = 1;
  return p;
}

// The planner's plan for p must be the config the emulation was compiled with.
template <class C>
void require_planned_as(const ops::TopkProblem& p) {
  const auto op = ops::TopkOp::create(p, nullptr);
  const plan::KernelPlan& kp = op->kernel_plan();
  INFO(op->plan_text());
  REQUIRE(kp.wgmma == C::kWgmma);
  REQUIRE(kp.head_sums == C::kHeadSums);
  REQUIRE(kp.mma == C::kMma);
  REQUIRE(kp.rows_per_cta == C::kRows);
  REQUIRE(kp.key_tile == C::kKeyTile);
  REQUIRE(kp.threads == C::kThreads);
  REQUIRE(kp.math_threads() == C::kMathThreads);
  REQUIRE(kp.bins == C::kBins);
  REQUIRE(kp.capacity == C::kCapacity);
  REQUIRE(kp.sample == C::kSample);
  // The stub's functor is the one emulated here.
  const std::string& src = op->source();
  CHECK(src.find("return winnow::op_mul(w, winnow::op_relu(dot));") != std::string::npos);
  CHECK(src.find("post(float hsum, const winnow::ScoreArgs& a) { return winnow::op_mul(hsum, "
                 "a.kscale); }") != std::string::npos);
}

// Runs the kernel of config C over d on a grid of two CTAs (the second finds no work
// item left: CTAs run one after another here), as TopkOp::execute would launch it.
template <class C>
ops::RunResult run_emulated(const ops::TopkProblem& p, const ops::ProblemData& d) {
  require_planned_as<C>(p);
  constexpr int kCtas = 2;
  constexpr TopkWorkspace W = workspace_of<C>();
  std::vector<u64> ws(size_t(kCtas) * size_t(W.cta_words()) + 1);
  std::vector<unsigned> counters(3, 0);
  ops::RunResult r;
  const int64_t rows = d.rows, keys = d.num_keys;
  TopkParams prm{};
  prm.q = d.q.bytes.data();
  prm.q_row_stride = int64_t(p.heads) * p.head_dim;
  prm.k = d.k.bytes.data();
  prm.k_row_stride = p.head_dim;
  prm.w = d.w.data();
  prm.w_row_stride = p.heads;
  prm.kscale = d.kscale.data();
  if (p.window == ops::WindowKind::Ranges) {
    prm.window_start = d.window_start.data();
    prm.window_end = d.window_end.data();
  }
  if (C::kMaterialize) {
    r.scores.assign(size_t(rows * keys), -1.0f);
    prm.out_scores = r.scores.data();
    prm.out_scores_stride = keys;
  } else {
    r.indices.assign(size_t(rows * p.k), 0x7EEEEEEE);
    r.scores.assign(size_t(rows * p.k), -1.0f);
    prm.out_indices = r.indices.data();
    prm.out_indices_stride = p.k;
    prm.out_scores = r.scores.data();
    prm.out_scores_stride = p.k;
  }
  prm.rows = int(rows);
  prm.num_keys = int(keys);
  prm.causal_offset = p.causal_offset;
  prm.causal_ratio = p.causal_ratio;
  prm.workspace = ws.data();
  prm.counters = counters.data();
  prm.key_splits = 1;
  const plan::KernelPlan kp = ops::TopkOp::create(p, nullptr)->kernel_plan();
  std::vector<unsigned char> smem(size_t(kp.smem_bytes()) + 1024, 0xA5);
  unsigned char* base =
      smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
  winnow_emu::shared_window = base;
  const TmaMap kmap = emu_key_tensor_map(d.k.bytes.data(), keys, p.head_dim, p.head_dim, C::kKeyTile);
  winnow_emu::launch(kCtas, 1, C::kThreads, [&] {
    topk_kernel<C, EmuReluScore>(prm, &kmap, base);
  });
  winnow_emu::shared_window = nullptr;
  r.fallback_rows = counters[0];
  r.bad_windows = counters[1];
  return r;
}

// Fused against materialize (both emulated) and the reference, as run_and_check does.
template <class Fused, class Materialize>
ops::RunResult emulate_and_check(const ops::TopkProblem& p, int64_t rows, int64_t keys,
                                 const ops::DataOptions& opt) {
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(rows) * 1315423911u + keys + p.k));
  const ops::ProblemData d = ops::random_problem(p, rows, keys, rng, opt);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  const ops::RunResult rf = run_emulated<Fused>(p, d);
  const ops::RunResult rm = run_emulated<Materialize>(pm, d);
  test::check_against_materialize(p, d, rf, rm);
  std::vector<int64_t> all;
  for (int64_t r = 0; r < rows; ++r) all.push_back(r);
  test::check_against_reference(p, d, rf, all, opt.levels > 0);
  return rf;
}

}  // namespace

TEST_CASE("emulated sm_90a kernel: relu_mh fp8, dense, unaligned keys", "[emu]") {
  INFO("seed " << test::test_seed());
  // 5 rows (a partial row block), 700 keys (a partial last tile), a sample of 256 keys
  // (gathered tiles) before the TMA filter.
  const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense);
  const ops::RunResult r = emulate_and_check<EmuReluConfig<31, 4096, 256, false, 0>,
                                             EmuReluConfig<31, 4096, 256, true, 0>>(p, 5, 700, {});
  CHECK(r.bad_windows == 0);
}

TEST_CASE("emulated sm_90a kernel: heavy ties, NaN and inf", "[emu]") {
  INFO("seed " << test::test_seed());
  const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense);
  ops::DataOptions opt;
  opt.levels = GENERATE(3, 0);
  opt.nan_fraction = opt.levels ? 0.0 : 0.01;
  opt.inf_fraction = opt.levels ? 0.0 : 0.01;
  INFO("levels " << opt.levels);
  emulate_and_check<EmuReluConfig<31, 4096, 256, false, 0>, EmuReluConfig<31, 4096, 256, true, 0>>(
      p, 4, 520, opt);
}

TEST_CASE("emulated sm_90a kernel: range windows, k = window, k > window, empty", "[emu]") {
  INFO("seed " << test::test_seed());
  // k = 300 against random windows of up to 900 keys: some hold fewer than k keys (-1
  // padding), some none; a capacity of 1024 overflows on the widest (the exact fallback).
  const auto p = emu_problem(300, 1024, 512, ops::WindowKind::Ranges);
  emulate_and_check<EmuReluConfig<300, 1024, 512, false, 1>, EmuReluConfig<300, 1024, 512, true, 1>>(
      p, 6, 900, {});
}
