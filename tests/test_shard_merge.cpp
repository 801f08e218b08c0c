// Sharded top-k (issue 19) on the CPU: the merge rule (testing/shard_reference.h, the
// candidates of templates/shard/shard_merge_params.cuh) against the unsharded select, the
// validation of sharded plans and of the merge op, and the merge kernel's compile.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/backend/backend.h"
#include "ops/shard/shard_merge.h"
#include "ops/common/topk_op.h"
#include "ops/common/validate.h"
#include "runtime/kernel_cache.h"
#include "support.h"
#include "topk_check.h"
#include "testing/shard_reference.h"
#include "shard/shard_merge_params.cuh"

using namespace winnow;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bit-for-bit equality of two outputs, naming the first difference.
void require_same(const ops::TopkLists& got, const ops::TopkLists& want) {
  REQUIRE(got.rows == want.rows);
  REQUIRE(got.k == want.k);
  for (size_t i = 0; i < want.indices.size(); ++i) {
    INFO("row " << i / want.k << " slot " << i % want.k);
    REQUIRE(got.indices[i] == want.indices[i]);
    REQUIRE(bits(got.scores[i]) == bits(want.scores[i]));
  }
}

// Shard boundaries: `ranks` parts of `total` keys, of random (unequal, possibly empty) sizes.
std::vector<int64_t> random_cuts(int ranks, int64_t total, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> at(0, total);
  std::vector<int64_t> cuts{0, total};
  for (int i = 1; i < ranks; ++i) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Merges the shards' fused outputs and compares with the unsharded fused output.
void check_sharded_equals_unsharded(const std::vector<float>& scores, int rows, int64_t total,
                                    const std::vector<int64_t>& cuts, int k, bool sorted) {
  std::vector<ops::TopkLists> lists;
  for (size_t r = 0; r + 1 < cuts.size(); ++r)
    lists.push_back(ops::fused_topk_lists(scores, rows, total, cuts[r], cuts[r + 1] - cuts[r], k,
                                          sorted));
  const ops::TopkLists want = ops::fused_topk_lists(scores, rows, total, 0, total, k, sorted);
  require_same(ops::merge_shard_lists(lists, sorted), want);
}

}  // namespace

TEST_CASE("shard candidates: padding is none, the rest rank as the kernel's RankKeys",
          "[shard][ref]") {
  CHECK(shard_candidate(-1, 5.0f) == 0ull);
  CHECK(shard_candidate(-7, 5.0f) == 0ull);
  CHECK(shard_candidate(0, -std::numeric_limits<float>::infinity()) != 0ull);
  CHECK(shard_candidate(3, 1.0f) > shard_candidate(4, 1.0f));  // ties: the smaller index
  CHECK(shard_candidate(9, std::nanf("")) > shard_candidate(0, 1e30f));  // NaN first
  CHECK(rank_key_index(shard_candidate(123456789, 2.0f)) == 123456789);
  // The kernel's scores come back unchanged: -0 is written as +0 and NaN canonical already.
  for (float s : {1.5f, -2.25f, 0.0f, std::numeric_limits<float>::infinity()})
    CHECK(bits(order_key_score(rank_key_order(shard_candidate(1, s)))) == bits(s));
}

TEST_CASE("merged shards of random scores equal the unsharded select, R = 1..8",
          "[shard][ref]") {
  std::mt19937_64 rng(test::test_seed());
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (bool sorted : {false, true}) {
      const int rows = 5;
      const int64_t total = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
      const int k = std::uniform_int_distribution<int>(1, 300)(rng);
      std::vector<float> scores(size_t(rows) * total);
      for (float& s : scores) s = d(rng);
      const std::vector<int64_t> cuts = random_cuts(ranks, total, rng);
      INFO("R = " << ranks << ", total " << total << ", k " << k << ", sorted " << sorted);
      check_sharded_equals_unsharded(scores, rows, total, cuts, k, sorted);
    }
  }
}

TEST_CASE("heavy ties across shard boundaries go to the smaller global index",
          "[shard][ref]") {
  // By hand: every key ties; the top 3 of keys 0..9 split 0..4 | 5..9 are 0, 1, 2.
  std::vector<float> flat(10, 1.0f);
  std::vector<ops::TopkLists> two = {ops::fused_topk_lists(flat, 1, 10, 5, 5, 3, true),
                                     ops::fused_topk_lists(flat, 1, 10, 0, 5, 3, true)};
  CHECK(ops::merge_shard_lists(two, true).indices == std::vector<int>{0, 1, 2});
  // One tie straddling the cut: keys 4 and 5 score 2, everything else 1; k = 2: 4, 5.
  flat[4] = flat[5] = 2.0f;
  two = {ops::fused_topk_lists(flat, 1, 10, 0, 5, 2, false),
         ops::fused_topk_lists(flat, 1, 10, 5, 5, 2, false)};
  CHECK(ops::merge_shard_lists(two, false).indices == std::vector<int>{4, 5});
  // Random: three score levels, many ranks, cuts anywhere.
  std::mt19937_64 rng(test::test_seed() ^ 0x19);
  std::uniform_int_distribution<int> level(0, 2);
  for (int trial = 0; trial < 20; ++trial) {
    const int rows = 3, ranks = 1 + trial % 8;
    const int64_t total = std::uniform_int_distribution<int64_t>(1, 800)(rng);
    const int k = std::uniform_int_distribution<int>(1, 400)(rng);
    std::vector<float> scores(size_t(rows) * total);
    for (float& s : scores) s = float(level(rng));
    INFO("trial " << trial << ": R = " << ranks << ", total " << total << ", k " << k);
    check_sharded_equals_unsharded(scores, rows, total, random_cuts(ranks, total, rng), k,
                                   trial % 2 == 0);
  }
}

TEST_CASE("shard merge: NaN first, -0 as +0, infinities", "[shard][ref]") {
  std::mt19937_64 rng(test::test_seed() ^ 0x4e614e);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, -nan, inf, -inf, 0.0f, -0.0f, 1.0f};
  std::uniform_int_distribution<int> pick(0, 6);
  for (int trial = 0; trial < 10; ++trial) {
    const int rows = 4;
    const int64_t total = 500;
    std::vector<float> scores(size_t(rows) * total);
    for (float& s : scores) s = specials[pick(rng)];
    const int k = 1 + trial * 37;
    check_sharded_equals_unsharded(scores, rows, total, random_cuts(1 + trial % 8, total, rng),
                                   k, trial % 2 == 1);
  }
  // NaN in the last shard still ranks first.
  std::vector<float> s = {5, 4, 3, nan};
  const std::vector<ops::TopkLists> lists = {ops::fused_topk_lists(s, 1, 4, 0, 3, 2, true),
                                             ops::fused_topk_lists(s, 1, 4, 3, 1, 2, true)};
  const ops::TopkLists m = ops::merge_shard_lists(lists, true);
  CHECK(m.indices == std::vector<int>{3, 0});
  CHECK(std::isnan(m.scores[0]));
}

TEST_CASE("shard merge: k above the total keys pads with -1, empty shards add nothing",
          "[shard][ref]") {
  std::vector<float> s = {1, 2, 3, 4, 5};
  // Shards 0..2, nothing, 2..5, nothing.
  std::vector<ops::TopkLists> lists = {
      ops::fused_topk_lists(s, 1, 5, 0, 2, 8, false), ops::fused_topk_lists(s, 1, 5, 2, 0, 8, false),
      ops::fused_topk_lists(s, 1, 5, 2, 3, 8, false), ops::fused_topk_lists(s, 1, 5, 5, 0, 8, false)};
  const ops::TopkLists m = ops::merge_shard_lists(lists, false);
  CHECK(m.indices == std::vector<int>{0, 1, 2, 3, 4, -1, -1, -1});
  CHECK(std::isinf(m.scores[7]));
  CHECK(m.scores[7] < 0);
  // Every shard empty: all padding.
  const ops::TopkLists none =
      ops::merge_shard_lists({ops::fused_topk_lists(s, 1, 5, 0, 0, 3, true)}, true);
  CHECK(none.indices == std::vector<int>{-1, -1, -1});
  // Random: k above the total with unequal and empty shards, R = 1..8.
  std::mt19937_64 rng(test::test_seed() ^ 0xe3);
  std::normal_distribution<float> d;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    const int64_t total = std::uniform_int_distribution<int64_t>(0, 60)(rng);
    std::vector<float> scores(2 * size_t(total));
    for (float& x : scores) x = d(rng);
    check_sharded_equals_unsharded(scores, 2, total, random_cuts(ranks, total, rng), 64,
                                   ranks % 2 == 0);
  }
}

TEST_CASE("the merge reference refuses what it cannot merge", "[shard][ref]") {
  CHECK_THROWS(ops::merge_shard_lists({}, false));
  std::vector<float> s = {1, 2};
  CHECK_THROWS(ops::merge_shard_lists({ops::fused_topk_lists(s, 1, 2, 0, 1, 1, false),
                                       ops::fused_topk_lists(s, 1, 2, 1, 1, 2, false)},
                                      false));
}

namespace {
ops::TopkProblem ip_problem(int k) {
  ops::TopkProblem p = test::single_head(ir::ip(), 16, k, ops::DType::F32);
  p.arch = backend::parse_arch("sm_90a");
  return p;
}
}  // namespace

TEST_CASE("sharded plans: offset and total keys are checked", "[shard]") {
  ops::TopkProblem p = ip_problem(16);
  p.total_keys = 1000;
  p.shard_key_offset = 500;
  CHECK_NOTHROW(ops::validate_problem(p));
  p.shard_key_offset = 1000;
  CHECK_THROWS_WITH(ops::validate_problem(p), Catch::Contains("shard_key_offset = 1000"));
  p.shard_key_offset = -1;
  CHECK_THROWS_WITH(ops::validate_problem(p), Catch::Contains("shard_key_offset = -1"));
  p.total_keys = 0;
  p.shard_key_offset = 3;
  CHECK_THROWS_WITH(ops::validate_problem(p), Catch::Contains("0 when not sharded"));
  p.shard_key_offset = 0;
  p.total_keys = int64_t(1) << 31;
  CHECK_THROWS_WITH(ops::validate_problem(p), Catch::Contains("total_keys"));
  p.total_keys = 10;
  p.mode = ops::Mode::Materialize;
  CHECK_THROWS_WITH(ops::validate_problem(p), Catch::Contains("top-k mode"));
}

TEST_CASE("sharded calls: K must fit the shard, causal windows end by total_keys", "[shard]") {
  ops::TopkProblem p = ip_problem(4);
  p.total_keys = 100;
  p.shard_key_offset = 60;
  alignas(256) static float q[8 * 16], k[64 * 16];
  alignas(256) static int out[8 * 4];
  ops::TopkInputs in;
  in.q = ops::contiguous_view(q, ops::DType::F32, {8, 16});
  in.k = ops::contiguous_view(k, ops::DType::F32, {40, 16});
  const ops::TensorView idx = ops::contiguous_view(out, ops::DType::I32, {8, 4});
  CHECK_NOTHROW(ops::validate_call(p, 0, in, &idx, nullptr, nullptr, 0, 0));
  in.k = ops::contiguous_view(k, ops::DType::F32, {41, 16});
  CHECK_THROWS_WITH(ops::validate_call(p, 0, in, &idx, nullptr, nullptr, 0, 0),
                    Catch::Contains("shard holds keys 60..99"));
  in.k = ops::contiguous_view(k, ops::DType::F32, {40, 16});
  p.window = ops::WindowKind::Causal;
  p.causal_offset = 92;  // rows 0..7 at positions 92..99: the last sees t < 100
  CHECK_NOTHROW(ops::validate_call(p, 0, in, &idx, nullptr, nullptr, 0, 0));
  p.causal_offset = 93;
  CHECK_THROWS_WITH(ops::validate_call(p, 0, in, &idx, nullptr, nullptr, 0, 0),
                    Catch::Contains("past total_keys 100"));
}

TEST_CASE("shard merge op: arguments are checked at create and at execute", "[shard]") {
  ops::ShardMergeProblem p;
  p.arch = backend::parse_arch("sm_90a");
  p.max_rows = 64;
  auto op = ops::ShardMergeOp::create(p, nullptr);
  CHECK(op->workspace_bytes() == 256 + size_t(64) * 2048 * 8 * 3);
  for (auto [field, value, text] :
       {std::tuple{"ranks", 0, "ranks = 0"}, {"ranks", 1025, "ranks = 1025"},
        {"k", 0, "k = 0"}, {"k", 8193, "k = 8193"}, {"max_rows", 0, "max_rows = 0"}}) {
    ops::ShardMergeProblem b = p;
    if (std::string(field) == "ranks") b.ranks = value;
    if (std::string(field) == "k") b.k = value;
    if (std::string(field) == "max_rows") b.max_rows = value;
    CHECK_THROWS_WITH(ops::ShardMergeOp::create(b, nullptr), Catch::Contains(text));
  }
  ops::ShardMergeProblem huge = p;
  huge.max_rows = int64_t(1) << 30;
  huge.k = 8192;
  CHECK_THROWS_WITH(ops::ShardMergeOp::create(huge, nullptr), Catch::Contains("2^40"));
  ops::ShardMergeProblem old = p;
  old.arch = backend::parse_arch("sm_80");
  CHECK_THROWS_AS(ops::ShardMergeOp::create(old, nullptr), ops::NotSupported);

  p.k = 4;
  op = ops::ShardMergeOp::create(p, nullptr);
  alignas(256) static int idx[2 * 8 * 4];
  alignas(256) static float sc[2 * 8 * 4];
  alignas(256) static unsigned char ws[256 + 64 * 4 * 8 * 3];
  const auto i2 = ops::contiguous_view(idx, ops::DType::I32, {8, 4});
  const auto s2 = ops::contiguous_view(sc, ops::DType::F32, {8, 4});
  const auto i3 = ops::contiguous_view(idx, ops::DType::I32, {2, 8, 4});
  const auto s3 = ops::contiguous_view(sc, ops::DType::F32, {2, 8, 4});
  const ops::AllGather none = [](const void*, void*, size_t, CUstream) {};
  auto run = [&](const ops::TensorView& li, const ops::TensorView& ls, const ops::AllGather* g,
                 const ops::TensorView& oi, void* w, size_t bytes) {
    op->execute(li, ls, g, oi, nullptr, w, bytes, nullptr);
  };
  CHECK_THROWS_WITH(run(i3, s3, &none, i2, ws, sizeof ws), Catch::Contains("expected 2"));
  CHECK_THROWS_WITH(run(i2, s2, nullptr, i2, ws, sizeof ws), Catch::Contains("[ranks, rows, k]"));
  CHECK_THROWS_WITH(run(i2, ops::TensorView{}, &none, i2, ws, sizeof ws),
                    Catch::Contains("local_scores missing"));
  CHECK_THROWS_WITH(run(i2, i2, &none, i2, ws, sizeof ws), Catch::Contains("dtype is int32"));
  CHECK_THROWS_WITH(run(i2, s2, &none, ops::contiguous_view(idx, ops::DType::I32, {8, 5}), ws,
                        sizeof ws),
                    Catch::Contains("expected k = 4"));
  CHECK_THROWS_WITH(run(ops::contiguous_view(idx, ops::DType::I32, {65, 4}),
                        ops::contiguous_view(sc, ops::DType::F32, {65, 4}), &none,
                        ops::contiguous_view(idx, ops::DType::I32, {65, 4}), ws, sizeof ws),
                    Catch::Contains("max_rows is 64"));
  CHECK_THROWS_WITH(run(i2, s2, &none, i2, nullptr, 0), Catch::Contains("workspace is null"));
  CHECK_THROWS_WITH(run(i2, s2, &none, i2, ws + 8, sizeof ws - 8),
                    Catch::Contains("256-byte aligned"));
  CHECK_THROWS_AS(run(i2, s2, &none, i2, ws, 256), ops::WorkspaceTooSmall);
  CHECK_THROWS_AS(run(i2, s2, &none, i2, ws, sizeof ws), ops::NotBuilt);  // valid: not built
}

TEST_CASE("the shard merge kernels compile for sm_90a and sm_100a without a GPU",
          "[nvrtc][shard]") {
  const char* arch = GENERATE("sm_90a", "sm_100a");
  INFO(arch);
  ops::ShardMergeProblem p;
  p.arch = backend::parse_arch(arch);
  p.max_rows = 16;
  auto op = ops::ShardMergeOp::create(p, nullptr);
  CHECK_THAT(op->source(), Catch::Contains("winnow_shard_merge"));
  auto be = backend::make_nvrtc_backend();
  backend::CompileRequest req = op->compile_request();
  const backend::CompileResult r = be->compile(req, /*emit_ptx=*/true);
  CHECK(r.cubin.size() > 1000);
  for (const char* entry : {"winnow_shard_pack", "winnow_shard_merge"})
    CHECK(r.ptx.find(std::string(".entry ") + entry) != std::string::npos);
  rt::CubinCache cache(std::nullopt);
  op->build(cache, *be);
  CHECK(op->built());
  CHECK(std::string(op->cubin().data() + 1, 3) == "ELF");
}
