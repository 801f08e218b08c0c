// The fused top-k kernel's sm_90a path run on the CPU (tests/emu/cuda_emulation.h): the
// producer warp's TMA loads and cp.async gathers into the mbarrier ring, the math
// warpgroups' wgmma head sums from the accumulators, the sample, the gate, the candidate
// buffers, the exact fallback and the select, with the planner's own constants. The
// fused result must equal the emulated materialize kernel's scores + an exact select bit
// for bit, and the CPU double reference within the accumulation tolerance: the same
// checks as the [gpu] cases (tests/topk_check.h), before any GPU run. Tiny shapes (the
// emulation runs one std::thread per CUDA thread): a few seconds per case.
// A file that includes this one with a kernel switch set names its cases with EMU_CASE
// (tests/test_topk_emulated_sort.cpp: the index order through the bitonic sort).
#ifndef EMU_CASE
#define EMU_CASE(what) "emulated sm_90a kernel: " what
#endif

#include <cstring>

#include "ops/common/topk_op.h"
#include "topk_check.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "topk/topk_kernel.cuh"
// The relu_mh functor (checked below against the stub).
#include "emu/relu_score.h"

using namespace winnow;

namespace {

// The wgmma path's forms (PlanKnobs::pipeline): plain, pipelined.
enum : int { kPlain = 0, kPipe = 1 };

// The generated stub's config for relu_mh with the key scale, d = 128, on sm_90a
// (compiler/codegen/emit_cuda.cpp prints the same constants; run_emulated checks them
// against the planner's): H heads of element type ELEM (fp8: 2 rows of 64 heads per CTA,
// bf16: 4 rows of 32), in the wgmma path's form FORM.
template <int H, int ELEM, int K, int CAP, int SAMPLE, bool MAT, int WINDOW, int FORM = kPlain,
          int BINS = 2048>
struct EmuReluConfig {
  static constexpr int kHeads = H, kDim = 128;
  static constexpr int kQElem = ELEM, kKElem = ELEM;
  static constexpr bool kMaterialize = MAT;
  static constexpr int kTopK = K;
  static constexpr int kWindow = WINDOW;
  static constexpr bool kSorted = false, kAbsolute = false;
  static constexpr bool kUsesW = true, kUsesKScale = true, kUsesQSq = false, kUsesKSq = false;
  static constexpr int kRows = 128 / H, kKeyTile = 128, kThreads = FORM == kPipe ? 384 : 288,
                       kMathThreads = 256;
  static constexpr int kBins = BINS, kCapacity = CAP, kSample = SAMPLE;
  static constexpr int kMma = ELEM;
  static constexpr bool kHeadSums = true, kWgmma = true;
  static constexpr bool kPipelined = FORM == kPipe;
};
template <int K, int CAP, int SAMPLE, bool MAT, int WINDOW, int FORM = kPlain>
using EmuFp8 = EmuReluConfig<64, kElemE4M3, K, CAP, SAMPLE, MAT, WINDOW, FORM>;

ops::TopkProblem emu_problem(int k, int capacity, int sample, ops::WindowKind window,
                             int heads = 64, ops::DType t = ops::DType::E4M3,
                             int form = kPlain) {
  ops::TopkProblem p = test::relu_mh_problem(heads, k, t);
  p.plan_knobs.pipeline = form;
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
  REQUIRE(kp.pipelined == C::kPipelined);
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
// key_splits > 1: each row's window in that many parts, merged by the last CTA of the
// row block (here the one CTA that takes every item).
// scores false: indices only (the kernel's path for index-only calls).
template <class C>
ops::RunResult run_emulated(const ops::TopkProblem& p, const ops::ProblemData& d,
                            int key_splits = 1, bool scores = true) {
  require_planned_as<C>(p);
  constexpr int kCtas = 2;
  constexpr TopkWorkspace W = workspace_of<C>();
  std::vector<u64> ws(size_t(kCtas) * size_t(W.cta_words()) + 1);
  std::vector<unsigned> counters(3, 0);
  const int64_t blocks = (d.rows + C::kRows - 1) / C::kRows;
  std::vector<u64> partials(size_t(W.partial(blocks, key_splits, 0, 0)) + 1);
  std::vector<unsigned> block_done(size_t(blocks) + 1, 0);
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
    prm.out_indices = r.indices.data();
    prm.out_indices_stride = p.k;
    if (scores) {
      r.scores.assign(size_t(rows * p.k), -1.0f);
      prm.out_scores = r.scores.data();
      prm.out_scores_stride = p.k;
    }
  }
  prm.rows = int(rows);
  prm.num_keys = int(keys);
  prm.key_offset = 0;  // not sharded: the shard is every key
  prm.total_keys = int(keys);
  prm.causal_offset = p.causal_offset;
  prm.causal_ratio = p.causal_ratio;
  prm.workspace = ws.data();
  prm.counters = counters.data();
  prm.key_splits = C::kMaterialize ? 1 : key_splits;
  prm.partials = partials.data();
  prm.block_done = block_done.data();
  const plan::KernelPlan kp = ops::TopkOp::create(p, nullptr)->kernel_plan();
  std::vector<unsigned char> smem(size_t(kp.smem_bytes()) + 1024, 0xA5);
  unsigned char* base =
      smem.data() + (1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024;
  winnow_emu::shared_window = base;
  const int row_bytes = p.head_dim * int(C::kKElem == kElemE4M3 ? 1 : 2);
  const TmaMap kmap = emu_key_tensor_map(d.k.bytes.data(), keys, row_bytes, row_bytes, C::kKeyTile);
  // The pipelined form moves registers between its warpgroups: model the pool.
  winnow_emu::launch_regs = launch_regs_of<C>();
  winnow_emu::launch(kCtas, 1, C::kThreads, [&] {
    topk_kernel<C, EmuReluScore<C::kHeads>>(prm, &kmap, base);
  });
  winnow_emu::shared_window = nullptr;
  r.fallback_rows = counters[0];
  r.bad_windows = counters[1];
  return r;
}

// Fused against materialize (both emulated) and the reference, as run_and_check does.
template <class Fused, class Materialize>
ops::RunResult emulate_and_check(const ops::TopkProblem& p, int64_t rows, int64_t keys,
                                 const ops::DataOptions& opt, int key_splits = 1) {
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(rows) * 1315423911u + keys + p.k));
  const ops::ProblemData d = ops::random_problem(p, rows, keys, rng, opt);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  const ops::RunResult rf = run_emulated<Fused>(p, d, key_splits);
  const ops::RunResult rm = run_emulated<Materialize>(pm, d);
  test::check_against_materialize(p, d, rf, rm);
  std::vector<int64_t> all;
  for (int64_t r = 0; r < rows; ++r) all.push_back(r);
  test::check_against_reference(p, d, rf, all, opt.levels > 0);
  return rf;
}

}  // namespace

TEST_CASE(EMU_CASE("relu_mh fp8, dense, unaligned keys"), "[emu]") {
  INFO("seed " << test::test_seed());
  // 5 rows (a partial row block), 700 keys (a partial last tile); the windows fit the
  // buffer, so no sample is scored (the capacity case below takes one).
  const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense);
  const ops::RunResult r = emulate_and_check<EmuFp8<31, 4096, 256, false, 0>,
                                             EmuFp8<31, 4096, 256, true, 0>>(p, 5, 700, {});
  CHECK(r.bad_windows == 0);
  // No buffer can overflow here and the sample's guess keeps more than k keys: a fallback
  // would mean appends were lost (the exact fallback would hide them from the checks).
  CHECK(r.fallback_rows == 0);
}

TEST_CASE(EMU_CASE("heavy ties, NaN and inf, at two plans' constants"), "[emu]") {
  INFO("seed " << test::test_seed());
  ops::DataOptions opt;
  opt.levels = GENERATE(3, 0);
  opt.nan_fraction = opt.levels ? 0.0 : 0.01;
  opt.inf_fraction = opt.levels ? 0.0 : 0.01;
  INFO("levels " << opt.levels);
  // A capacity of 4096: 2048 bins, the buffer checked every 4 tiles. A capacity of 8192
  // (dsa's k = 2048 has 4 k): a quarter holds 16 key tiles, so the planner picks 512 bins,
  // the buffer is checked every 16 tiles and the gate refreshed every 8; 2300 keys are 18
  // tiles, one buffer check inside the loop.
  const bool dsa = GENERATE(false, true);
  INFO((dsa ? "capacity 8192, 512 bins" : "capacity 4096, 2048 bins"));
  using DsaF = EmuReluConfig<64, kElemE4M3, 31, 8192, 256, false, 0, kPlain, 512>;
  using DsaM = EmuReluConfig<64, kElemE4M3, 31, 8192, 256, true, 0, kPlain, 512>;
  const ops::RunResult r =
      dsa ? emulate_and_check<DsaF, DsaM>(emu_problem(31, 8192, 256, ops::WindowKind::Dense), 3,
                                          2300, opt)
          : emulate_and_check<EmuFp8<31, 4096, 256, false, 0>, EmuFp8<31, 4096, 256, true, 0>>(
                emu_problem(31, 4096, 256, ops::WindowKind::Dense), 4, 520, opt);
  // Heavy ties put most keys past the gate; no append may be lost (see above).
  CHECK(r.fallback_rows == 0);
}

TEST_CASE(EMU_CASE("windows past the capacity: the sample sets each row's first gate"), "[emu]") {
  INFO("seed " << test::test_seed());
  // 2300 keys against a capacity of 512: every row scores a strided sample of 256 keys
  // first, and its 23rd best (2 k ns / n + 16), found by radix select, becomes the low edge
  // of the bins. Heavy ties overflow the small buffer (the exact fallback).
  ops::DataOptions opt;
  opt.levels = GENERATE(0, 3);
  INFO("levels " << opt.levels);
  const auto p = emu_problem(31, 512, 256, ops::WindowKind::Dense);
  const ops::RunResult r = emulate_and_check<EmuFp8<31, 512, 256, false, 0>,
                                             EmuFp8<31, 512, 256, true, 0>>(p, 3, 2300, opt);
  // About 200 random keys of 2300 score above the sample's 23rd best of 256: none overflows
  // 512, and fewer than k above it would mean the sample's rank was wrong.
  if (opt.levels == 0) CHECK(r.fallback_rows == 0);
}

TEST_CASE(EMU_CASE("range windows, k = window, k > window, empty"), "[emu]") {
  INFO("seed " << test::test_seed());
  // k = 300 against random windows of up to 900 keys: some hold fewer than k keys (-1
  // padding), some none; a capacity of 1024 overflows on the widest (the exact fallback).
  const auto p = emu_problem(300, 1024, 512, ops::WindowKind::Ranges);
  emulate_and_check<EmuFp8<300, 1024, 512, false, 1>, EmuFp8<300, 1024, 512, true, 1>>(
      p, 6, 900, {});
}

TEST_CASE(EMU_CASE("windows within k and indices only: every key of each window in order"), "[emu]") {
  INFO("seed " << test::test_seed());
  // Every row's window holds at most k = 300 keys (one exactly k, one empty, one outside
  // the keys: a bad window), so an index-only call selects every key without scoring; the
  // same call with scores takes the full path (checked against the reference above). The
  // indices must agree; so must the counters.
  const auto p = emu_problem(300, 1024, 512, ops::WindowKind::Ranges);
  std::mt19937_64 rng(test::test_seed() ^ 0x51u);
  ops::ProblemData d = ops::random_problem(p, 6, 900, rng);
  const std::vector<int> len = test::windows_within_k(d, 300, 17);
  using C = EmuFp8<300, 1024, 512, false, 1>;
  const ops::RunResult only = run_emulated<C>(p, d, 1, false);
  const ops::RunResult full = run_emulated<C>(p, d, 1, true);
  CHECK(only.indices == full.indices);
  CHECK(only.bad_windows == 1);
  CHECK(full.bad_windows == 1);
  // Relative to each window's start, in order, -1 padded.
  int64_t wrong = 0;
  for (size_t r = 0; r < len.size(); ++r)
    for (int i = 0; i < 300; ++i) wrong += only.indices[r * 300 + size_t(i)] != (i < len[r] ? i : -1);
  CHECK(wrong == 0);
  CHECK(len[0] == 300);
}

TEST_CASE(EMU_CASE("key splits merged exactly"), "[emu]") {
  INFO("seed " << test::test_seed());
  // 1100 keys in 3 parts of whole key tiles; the last CTA of each row block merges them.
  const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense);
  const int splits = GENERATE(2, 3);
  INFO("key splits " << splits);
  emulate_and_check<EmuFp8<31, 4096, 256, false, 0>, EmuFp8<31, 4096, 256, true, 0>>(
      p, 3, 1100, {}, splits);
}

TEST_CASE(EMU_CASE("causal windows with ratio m"), "[emu]") {
  INFO("seed " << test::test_seed());
  auto p = emu_problem(64, 4096, 256, ops::WindowKind::Causal);
  p.causal_ratio = GENERATE(1, 4);
  p.causal_offset = 512 * p.causal_ratio - 3;
  INFO("ratio " << p.causal_ratio);
  emulate_and_check<EmuFp8<64, 4096, 256, false, 2>, EmuFp8<64, 4096, 256, true, 2>>(p, 7, 530, {});
}

TEST_CASE(EMU_CASE("relu_mh bf16, 32 heads, 4 rows per CTA"), "[emu]") {
  INFO("seed " << test::test_seed());
  const auto p = emu_problem(100, 4096, 256, ops::WindowKind::Dense, 32, ops::DType::BF16);
  using F = EmuReluConfig<32, kElemBF16, 100, 4096, 256, false, 0>;
  using M = EmuReluConfig<32, kElemBF16, 100, 4096, 256, true, 0>;
  emulate_and_check<F, M>(p, 9, 600, {});
}

TEST_CASE(EMU_CASE("the pipelined form (two accumulator sets, setmaxnreg)"), "[emu]") {
  INFO("seed " << test::test_seed());
  // Odd and even tile counts (the loop finishes two tiles per turn), ranges with k > window,
  // ties, key splits: the same checks as the plain form.
  SECTION("dense, 5 and 6 tiles") {
    const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense, 64, ops::DType::E4M3, kPipe);
    const int64_t keys = GENERATE(600, 700);
    emulate_and_check<EmuFp8<31, 4096, 256, false, 0, kPipe>, EmuFp8<31, 4096, 256, true, 0, kPipe>>(
        p, 5, keys, {});
  }
  SECTION("ranges, ties, fallback") {
    const auto p = emu_problem(300, 1024, 512, ops::WindowKind::Ranges, 64, ops::DType::E4M3, kPipe);
    ops::DataOptions opt;
    opt.levels = 5;
    emulate_and_check<EmuFp8<300, 1024, 512, false, 1, kPipe>, EmuFp8<300, 1024, 512, true, 1, kPipe>>(
        p, 6, 900, opt);
  }
  SECTION("key splits") {
    const auto p = emu_problem(31, 4096, 256, ops::WindowKind::Dense, 64, ops::DType::E4M3, kPipe);
    emulate_and_check<EmuFp8<31, 4096, 256, false, 0, kPipe>, EmuFp8<31, 4096, 256, true, 0, kPipe>>(
        p, 3, 1100, {}, 3);
  }
  SECTION("bf16, 32 heads") {
    const auto p = emu_problem(100, 4096, 256, ops::WindowKind::Dense, 32, ops::DType::BF16, kPipe);
    using F = EmuReluConfig<32, kElemBF16, 100, 4096, 256, false, 0, kPipe>;
    using M = EmuReluConfig<32, kElemBF16, 100, 4096, 256, true, 0, kPipe>;
    emulate_and_check<F, M>(p, 9, 600, {});
  }
}

TEST_CASE(EMU_CASE("the gate refresh interval: 8 tiles where the buffer is checked every 16, else 4"), "[emu]") {
  // templates/topk/topk_kernel.cuh: the plans measured faster at 8 (docs/decisions/0055)
  // are those whose buffer is checked every 16 tiles; the others keep 4.
#ifdef WINNOW_GATE_REFRESH_TILES
  CHECK(gate_refresh_tiles(16) == WINNOW_GATE_REFRESH_TILES);
#else
  CHECK(gate_refresh_tiles(16) == 8);
  CHECK(gate_refresh_tiles(4) == 4);
#endif
}
