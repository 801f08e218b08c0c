// The paged decode op's stream path (WINNOW_PAGED_STREAM=1; templates/paged_stream*.cuh)
// run on the CPU (tests/emu/cuda_emulation.h): the prepare kernel, the sample pass and the
// filter of the page stream (the producer's share of the pages and TMA boxes of the cache, wgmma
// m64n64 per row, the head sums), the per-row thresholds, and the retrieval mode's exact
// select with its radix fallback rounds, launched in the op's order with the op's
// arguments. Every row must equal the CPU reference (testing/paged_reference.h): position
// for position on integer inputs (exact float scores, heavy ties: smaller position first),
// and within the accumulation tolerance on random ones. Fresh random inputs each run (the
// seed is printed). Tiny shapes: the emulation runs one std::thread per CUDA thread.
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <random>

#include "ops/paged/paged_stream.h"
#include "paged_support.h"
#include "support.h"
#include "testing/paged_reference.h"
// The emulation goes before the device templates (and after every other header); the
// knn select's device code compiles for it under WINNOW_EMULATED.
#define WINNOW_EMULATED 1
#include "emu/cuda_emulation.h"
// The select's max of two RankKeys (CUDA's max overloads include 64-bit unsigned).
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a < b ? b : a; }
#include "paged/paged_stream_kernels.cuh"
#include "emu/relu_score.h"

using namespace winnow;

namespace {

template <int NN, int K, bool SORTED = false>
struct EmuStreamConfig {
  static constexpr int kStages = 3, kNextN = NN, kTopK = K;
  static constexpr int kRounds = kKnnRadixRounds;
  static constexpr bool kRadix = true, kSorted = SORTED;
  static constexpr int kHeads = 64, kDim = 128, kMma = kElemE4M3;
  static constexpr bool kWgmma = true;
  static constexpr bool kUsesW = true, kUsesKScale = true, kUsesQSq = false, kUsesKSq = false;
};

// relu_mh's functor (tests/emu/relu_score.h; test_paged_stream.cpp checks the stub prints it).
using EmuStreamScore = EmuReluScore<64>;

// Shared memory for the select kernels in the emulation (the window is 256 KB).
constexpr long kEmuSelectLimit = 96 * 1024;

struct Outcome {
  std::vector<int> indices;
  u32 counters[64] = {};
  std::vector<KnnRowState> rows;  // after the last launch (count: the last round's survivors)
};

// A hook between the threshold (or hint) launch and round 0 (the adversarial cases lower
// the thresholds there, as a misleading sample would; the hint cases read them).
using Hook = std::function<void(std::vector<KnnRowState>&)>;

template <class C>
Outcome run_stream(const ops::PagedProblem& prob, const ops::PagedHostData& d, const Hook& hook = {},
                   const std::vector<int>* hint = nullptr) {
  constexpr int NN = C::kNextN, K = C::kTopK;
  const int B = d.batch, rows = B * NN;
  REQUIRE(prob.next_n == NN);
  REQUIRE(prob.k == K);
  REQUIRE(prob.sorted == C::kSorted);
  Outcome out;
  out.indices.assign(size_t(rows) * K, -7);
  // The op's own arguments (ops::paged_stream_params) over a host workspace filled with junk
  // (the launches must not read what they did not write).
  const size_t ws_bytes = ops::paged_stream_workspace_bytes(prob);
  std::vector<unsigned char> ws_memory(ws_bytes + 256, 0xA5);
  void* ws = ws_memory.data() + (256 - reinterpret_cast<uintptr_t>(ws_memory.data()) % 256) % 256;
  ops::PagedInputs in;
  auto at = [](const auto& v) { return const_cast<void*>(static_cast<const void*>(v.data())); };
  in.q = ops::contiguous_view(at(d.q), ops::DType::E4M3, {B, NN, 64, kPageDim});
  in.cache = ops::contiguous_view(at(d.cache), ops::DType::U8, {d.num_blocks, 64, 1, 132});
  in.block_table = ops::contiguous_view(at(d.block_table), ops::DType::I32, {B, d.max_blocks});
  in.context_lens = d.lens_per_query
                        ? ops::contiguous_view(at(d.context_lens), ops::DType::I32, {B, NN})
                        : ops::contiguous_view(at(d.context_lens), ops::DType::I32, {B});
  in.weights = ops::contiguous_view(at(d.w), ops::DType::F32, {rows, 64});
  if (hint) in.hint = ops::contiguous_view(at(*hint), ops::DType::I32, {rows, K});
  const ops::TensorView out_view = ops::contiguous_view(out.indices.data(), ops::DType::I32, {rows, K});
  // The stream on two CTAs, each streaming its half of the pages.
  PagedStreamParams ps = ops::paged_stream_params(prob, in, B, out_view, ws,
                                                  knn_select_stage_bytes(K, kEmuSelectLimit), 2);
  KnnParams& p = ps.knn;
  const TmaMap cmap = emu_key_tensor_map(d.cache.data(), d.num_blocks * kPagedBoxRows, 128, 128,
                                         kPagedBoxRows);
  const size_t stream_smem = size_t(PagedStreamSmem{C::kStages, NN}.bytes());
  const size_t select_smem = size_t(knn_select_smem_bytes(K) + p.stage_bytes);
  std::vector<KnnRowState> row_states;  // the hook's view of the row states

  auto per_row = [&](auto body) {
    if (rows > 0) winnow_emu::launch_clusters(unsigned(rows), 1, kKnnSelectThreads, select_smem, body);
  };
  // The op's launches (ops::paged_stream_steps), in its order.
  using Step = ops::PagedStreamStep;
  auto hooked = [&] {
    if (!hook) return;
    row_states.assign(p.rows, p.rows + rows);
    hook(row_states);
    std::copy(row_states.begin(), row_states.end(), p.rows);
  };
  for (const Step& s : ops::paged_stream_steps(prob, hint != nullptr)) {
    p.sample_pass = s.sample ? 1 : 0;
    p.round = s.round;
    switch (s.kernel) {
      case Step::Prepare:
        winnow_emu::launch(1, 1, kPagedPrepareThreads, [&] { paged_stream_prepare<kPagedPrepareThreads>(ps); });
        break;
      case Step::Stream:
        winnow_emu::launch_clusters(2, 1, kPagedStreamThreads, stream_smem, [&](unsigned char* smem) {
          paged_stream<C, EmuStreamScore>(ps, &cmap, smem);
        });
        break;
      case Step::Threshold:
        per_row([&](unsigned char* smem) { paged_stream_threshold<C>(ps, smem); });
        hooked();
        break;
      case Step::Hint:
        if (rows > 0)
          winnow_emu::launch_clusters(unsigned(rows), 1, kPagedHintThreads, size_t(PagedHintSmem::bytes()),
                                      [&](unsigned char* smem) { paged_stream_hint<C, EmuStreamScore>(ps, smem); });
        hooked();
        break;
      case Step::Select:
        per_row([&](unsigned char* smem) { paged_stream_select<C>(ps, smem); });
        break;
    }
  }
  // A hook sees the thresholds the threshold or hint launch set: its plan must have one.
  if (hook) REQUIRE(!row_states.empty());
  std::copy(p.counters, p.counters + 64, out.counters);
  out.rows.assign(p.rows, p.rows + rows);
  return out;
}

// Every row against the reference: position for position where `exact` (the problem's
// order: by position unsorted, best first sorted), else within the tolerance.
void check_rows(const ops::PagedProblem& p, const ops::PagedHostData& d, const Outcome& o, bool exact) {
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  int64_t wrong = 0;
  for (int64_t row = 0; row < int64_t(d.batch) * d.next_n; ++row) {
    const int* got = &o.indices[size_t(row) * p.k];
    bool ok;
    if (exact) {
      std::vector<int64_t> want = ops::paged_reference_row(p, g, row);
      if (!p.sorted) std::sort(want.begin(), want.end());
      want.resize(size_t(p.k), -1);
      ok = std::equal(want.begin(), want.end(), got, [](int64_t a, int b) { return a == b; });
    } else {
      ok = ops::paged_row_matches(p, g, row, got);
    }
    if (!ok && wrong++ < 3) {
      std::string s;
      for (int i = 0; i < std::min(p.k, 12); ++i) s += std::to_string(got[i]) + " ";
      UNSCOPED_INFO("row " << row << " differs from the reference; got " << s);
    }
  }
  CHECK(wrong == 0);
  CHECK(o.counters[kKnnUnresolvedRows] == 0);
}

ops::PagedProblem stream_problem(int k, int next_n, int max_batch, int max_blocks, bool sorted = false) {
  ops::PagedProblem p = test::decode_problem(64, k, next_n, max_batch, max_blocks);
  p.sorted = sorted;
  return p;
}

}  // namespace

TEST_CASE("emulated paged stream: edge lengths equal the reference position for position", "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  ops::PagedDataOptions opt;
  opt.levels = 3;  // integer inputs: exact scores, heavy ties
  SECTION("k 64 next_n 2 at len 0 1 63 64 65 130 200 511, plans of 8 and 70 pages") {
    // 8 pages: within the list (no sample, no fallback); 70: sample, thresholds, all rounds.
    for (const auto& [blocks, launches] : {std::pair{8, 3}, std::pair{70, 3 + 2 * (kKnnRadixRounds + 1)}}) {
      INFO("plan of " << blocks << " pages");
      const auto p = stream_problem(64, 2, 8, blocks);
      REQUIRE(ops::paged_stream_steps(p).size() == size_t(launches));
      const auto d = ops::random_paged_data(p, {0, 1, 63, 64, 65, 130, 200, 511}, rng, opt);
      const Outcome o = run_stream<EmuStreamConfig<2, 64>>(p, d);
      check_rows(p, d, o, true);
      CHECK(o.counters[1] == 0);
    }
  }
  SECTION("k 128 next_n 2, a plan of 2 pages: every window fits in k, nothing streamed") {
    const auto p = stream_problem(128, 2, 5, 2);
    REQUIRE(ops::paged_stream_steps(p).size() == 2);
    const auto d = ops::random_paged_data(p, {0, 1, 64, 100, 128}, rng, opt);
    check_rows(p, d, run_stream<EmuStreamConfig<2, 128>>(p, d), true);
  }
  SECTION("k 1 next_n 1: every length above k filtered") {
    const auto p = stream_problem(1, 1, 4, 4);
    const auto d = ops::random_paged_data(p, {0, 1, 2, 129}, rng, opt);
    check_rows(p, d, run_stream<EmuStreamConfig<1, 1>>(p, d), true);
  }
  SECTION("random inputs at k 64 and next_n 4 on both warpgroups") {
    const auto p = stream_problem(64, 4, 3, 20);
    const auto d = ops::random_paged_data(p, {0, 700, 1250}, rng);
    check_rows(p, d, run_stream<EmuStreamConfig<4, 64>>(p, d), false);
  }
  SECTION("sorted k 16 next_n 3 with lens per query") {
    const auto p = stream_problem(16, 3, 3, 4, true);
    ops::PagedDataOptions per = opt;
    per.lens_per_query = true;
    const auto d = ops::random_paged_data(p, {2, 17, 190}, rng, per);
    check_rows(p, d, run_stream<EmuStreamConfig<3, 16, true>>(p, d), true);
  }
}

TEST_CASE("emulated paged stream: dsa's k = 2048, windows within and past the list", "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // 4096 keys fit the list (8192 at k = 2048): every key is a candidate; 9000 pass it: the
  // sample and the thresholds run. The other cases' k (1 to 128) leave the select's lists
  // short; here each row's list holds thousands of entries, as at dsa's decode shapes.
  const auto p = stream_problem(2048, 1, 2, 150);
  const auto d = ops::random_paged_data(p, {4096, 9000}, rng);
  const Outcome o = run_stream<EmuStreamConfig<1, 2048>>(p, d);
  check_rows(p, d, o, false);
  // Random scores: the sample's threshold leaves between k and the capacity in the list
  // (several standard deviations from either edge), so no row falls back; a threshold
  // above the k-th best would send the 9000-key row back (exact, but counted).
  CHECK(o.counters[kKnnFallbackRows] == 0);
}

TEST_CASE("emulated paged stream: a sampled request with heavy ties and NaN and inf", "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // Windows above the list's capacity (4096 at k <= 1024): the sample pass and the
  // thresholds run; with 2 levels nearly every key ties, so the lists overflow and the radix
  // rounds answer the rows.
  const auto p = stream_problem(32, 1, 2, 80);
  ops::PagedDataOptions opt;
  opt.levels = GENERATE(2, 5);
  INFO("levels " << opt.levels);
  auto d = ops::random_paged_data(p, {5000, 4500}, rng, opt);
  // NaN and inf in the scales (NaN ranks first), NaN in a q element of request 1.
  const float nan = std::nanf(""), inf = INFINITY;
  for (int64_t b = 0; b < d.num_blocks; b += 7) {
    std::memcpy(&d.cache[size_t(b) * kPageBytes + kPageKeyBytes + 4 * 3], &nan, 4);
    std::memcpy(&d.cache[size_t(b) * kPageBytes + kPageKeyBytes + 4 * 9], &inf, 4);
  }
  const Outcome o = run_stream<EmuStreamConfig<1, 32>>(p, d);
  check_rows(p, d, o, true);
}

TEST_CASE("emulated paged stream: thresholds far too low take the radix rounds", "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const bool ties = GENERATE(false, true);
  INFO("ties " << ties);
  const auto p = stream_problem(64, 2, 2, 150);
  ops::PagedDataOptions opt;
  opt.levels = ties ? 4 : 0;
  opt.nan_fraction = ties ? 0.0 : 0.01;
  auto d = ops::random_paged_data(p, {9000, 300}, rng, opt);
  // Request 0's scores rise with the position (positive weights, page i's scales
  // 2^(i / 2): the relu head sums are >= 0), so the list's first entries, kept when it overflows, are its
  // worst: the k-th best of them is far below the row's, and only the radix rounds answer.
  std::fill(d.w.begin(), d.w.end(), 1.0f);
  for (int i = 0; i * kPageKeys < 9000; ++i) {
    const float s = std::ldexp(1.0f, i / 2);
    uint8_t* page = &d.cache[size_t(d.block_table[size_t(i)]) * kPageBytes];
    for (int j = 0; j < kPageKeys; ++j) std::memcpy(page + kPageKeyBytes + 4 * j, &s, 4);
  }
  // Every threshold 0: every key of the 9000-key windows survives, over the capacity; the
  // k-th best of the first 4096 (the stored ones) still admits over 4096.
  const Outcome o = run_stream<EmuStreamConfig<2, 64>>(
      p, d, [](std::vector<KnnRowState>& rs) { for (auto& r : rs) r.threshold = 0; });
  CHECK(o.counters[kKnnFallbackRows] >= 2);     // both rows of request 0
  CHECK(o.counters[kKnnRoundRows + 2] >= 2);  // and the radix rounds after round 1
  check_rows(p, d, o, ties);
}

TEST_CASE("emulated paged stream: bad requests give -1 rows and are counted", "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const auto p = stream_problem(8, 1, 4, 4);
  auto d = ops::random_paged_data(p, {100, 5, 30, 40}, rng);
  d.context_lens[0] = 257;                  // above max_blocks_per_seq * 64
  d.block_table[1 * 4] = int(d.num_blocks);  // outside the cache, a request not streamed
  d.block_table[3 * 4] = -1;                 // outside the cache, a streamed request
  const Outcome o = run_stream<EmuStreamConfig<1, 8>>(p, d);
  check_rows(p, d, o, false);
  CHECK(o.counters[1] == 3);
  for (int r : {0, 1, 3})
    for (int i = 0; i < 8; ++i) CHECK(o.indices[size_t(r) * 8 + i] == -1);
}

namespace {

// Each row's reference top k (best first, -1 padded): the hint an exact previous call gives.
std::vector<int> reference_hint(const ops::PagedProblem& p, const ops::PagedHostData& d) {
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  std::vector<int> h(size_t(d.batch) * d.next_n * p.k, -1);
  for (int64_t row = 0; row < int64_t(d.batch) * d.next_n; ++row) {
    const std::vector<int64_t> want = ops::paged_reference_row(p, g, row);
    for (size_t i = 0; i < want.size() && i < size_t(p.k); ++i) h[size_t(row) * p.k + i] = int(want[i]);
  }
  return h;
}

// The row's visible keys (templates/paged/paged_cache.cuh's rule).
int visible_keys(const ops::PagedHostData& d, int64_t row) {
  const int r = int(row / d.next_n), j = int(row % d.next_n);
  const int* lens = &d.context_lens[size_t(r) * (d.lens_per_query ? d.next_n : 1)];
  return paged_visible_keys(lens, d.next_n, j, d.lens_per_query);
}

}  // namespace

TEST_CASE("emulated paged stream: a hint gives each row's threshold, exact whatever it holds",
          "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // 80 pages a request at most (above the list's 4096 keys: the 19-launch plan); requests
  // above, within and below the list, one shorter than k.
  constexpr int K = 64, NN = 2;
  const auto p = stream_problem(K, NN, 4, 80);
  REQUIRE(ops::paged_stream_steps(p, true).size() == 2 + 2 * size_t(kKnnRadixRounds + 1));
  ops::PagedDataOptions opt;
  opt.levels = 3;  // integer inputs: exact scores, heavy ties
  const auto d = ops::random_paged_data(p, {5000, 4200, 700, 40}, rng, opt);
  const int rows = d.batch * NN;
  const std::vector<int> exact = reference_hint(p, d);
  std::vector<KnnRowState> thr;
  const Hook keep = [&](std::vector<KnnRowState>& rs) { thr = rs; };
  auto filtered = [&](int row) { return visible_keys(d, row) > K; };

  SECTION("the exact top k, best first and ascending: k survivors, no fallback") {
    for (const bool ascending : {false, true}) {
      INFO("ascending " << ascending);
      std::vector<int> h = exact;
      if (ascending)
        for (int row = 0; row < rows; ++row) {
          auto* b = &h[size_t(row) * K];
          std::sort(b, b + K, [](int a, int c) { return unsigned(a) < unsigned(c); });  // -1 last
        }
      const Outcome o = run_stream<EmuStreamConfig<NN, K>>(p, d, keep, &h);
      check_rows(p, d, o, true);
      CHECK(o.counters[kKnnFallbackRows] == 0);
      for (int row = 0; row < rows; ++row) {
        INFO("row " << row << " sees " << visible_keys(d, row));
        // A bound exactly where the window holds k keys; it is the k-th best: k survive.
        CHECK((thr[size_t(row)].threshold != 0) == (visible_keys(d, row) >= K));
        if (filtered(row)) CHECK(o.rows[size_t(row)].count == u32(K));
      }
    }
  }
  SECTION("the previous step's selection: queries slightly changed") {
    ops::PagedHostData before = d;
    std::uniform_int_distribution<size_t> any(0, d.q.size() - 1);
    for (size_t i = 0; i < d.q.size() / 16; ++i) before.q[any(rng)] = d.q[any(rng)];
    const std::vector<int> h = reference_hint(p, before);
    const Outcome o = run_stream<EmuStreamConfig<NN, K>>(p, d, keep, &h);
    check_rows(p, d, o, true);
  }
  SECTION("stale: another row's selection") {
    std::vector<int> h(exact.size());
    for (int row = 0; row < rows; ++row)
      std::copy_n(&exact[size_t((row + 3) % rows) * K], K, &h[size_t(row) * K]);
    check_rows(p, d, run_stream<EmuStreamConfig<NN, K>>(p, d, keep, &h), true);
  }
  SECTION("all -1: no bound, the long rows take the fallback, counted") {
    const std::vector<int> h(exact.size(), -1);
    const Outcome o = run_stream<EmuStreamConfig<NN, K>>(p, d, keep, &h);
    check_rows(p, d, o, true);
    for (const KnnRowState& s : thr) CHECK(s.threshold == 0);
    CHECK(o.counters[kKnnFallbackRows] >= 4);  // requests 0 and 1 overflow the list
  }
  SECTION("a duplicate, a -1, a position past the window or the causal limit: no bound") {
    const int kind = GENERATE(0, 1, 2, 3);
    INFO("kind " << kind);
    std::vector<int> h = exact;
    for (int row = 0; row < rows; ++row) {
      int* b = &h[size_t(row) * K];
      const int v = visible_keys(d, row), r = row / NN;
      switch (kind) {
        case 0: b[K - 1] = b[K / 2]; break;  // the k-th counted twice would be a bound
        case 1: b[5] = -1; break;
        case 2: b[0] = d.context_lens[size_t(r)] + 64; break;  // past the request
        case 3: b[1] = v; break;  // query 0 of next_n 2: the last key only query 1 sees
      }
    }
    const Outcome o = run_stream<EmuStreamConfig<NN, K>>(p, d, keep, &h);
    check_rows(p, d, o, true);
    for (int row = 0; row < rows; ++row) CHECK(thr[size_t(row)].threshold == 0);
  }
}

TEST_CASE("emulated paged stream: a hint at k above the length, sorted rows, lens per query",
          "[emu][decode]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  constexpr int K = 16, NN = 3;
  const auto p = stream_problem(K, NN, 3, 70, true);
  ops::PagedDataOptions opt;
  opt.levels = 2;
  opt.lens_per_query = true;
  const auto d = ops::random_paged_data(p, {4400, 10, 130}, rng, opt);
  std::vector<int> h = reference_hint(p, d);
  std::vector<KnnRowState> thr;
  const Outcome o = run_stream<EmuStreamConfig<NN, K, true>>(
      p, d, [&](std::vector<KnnRowState>& rs) { thr = rs; }, &h);
  check_rows(p, d, o, true);
  CHECK(o.counters[kKnnFallbackRows] == 0);
  for (int row = 0; row < d.batch * NN; ++row) {
    INFO("row " << row << " sees " << visible_keys(d, row));
    CHECK((thr[size_t(row)].threshold != 0) == (visible_keys(d, row) >= K));
  }
}
