// The paged decode op (issue 18): its CPU reference and visibility rule [ref], its
// problem and tensor validation [decode], both modules through NVRTC with no GPU
// [nvrtc], and the device against the reference [gpu] (skipped visibly without a GPU).
#include <cstring>

#include "compiler/backend/backend.h"
#include "ops/paged/paged_topk.h"
#include "paged_support.h"
#include "support.h"
#include "testing/paged_harness.h"
#include "testing/paged_reference.h"
#include "topk_check.h"
#include "paged/paged_cache.cuh"

using namespace winnow;

using test::decode_problem;
using test::random_lens;

TEST_CASE("paged decode: the visibility rule of next_n queries", "[ref][decode]") {
  const int len = 100;
  CHECK(paged_visible_keys(&len, 1, 0, false) == 100);
  CHECK(paged_visible_keys(&len, 3, 0, false) == 98);
  CHECK(paged_visible_keys(&len, 3, 2, false) == 100);
  const int short_len = 1;
  CHECK(paged_visible_keys(&short_len, 3, 0, false) == 0);
  CHECK(paged_visible_keys(&short_len, 3, 2, false) == 1);
  const int per_query[3] = {5, 7, 6};
  CHECK(paged_visible_keys(per_query, 3, 1, true) == 7);
  CHECK(paged_request_keys(per_query, 3, true) == 7);
  CHECK(paged_request_keys(&len, 3, false) == 100);
}

TEST_CASE("paged decode reference: gathered through the block table, positions 0 to len - 1",
          "[ref][decode]") {
  auto p = decode_problem(4, 8, 2, 3, 4);
  std::mt19937_64 rng(test::test_seed());
  const std::vector<int> lens = {0, 70, 5};
  ops::PagedHostData d = ops::random_paged_data(p, lens, rng);
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  REQUIRE(g.in.num_keys == 75);
  REQUIRE(g.in.window_start.size() == 6);
  // Request 1, query 0 sees 69 keys, query 1 all 70; request 2's start after them.
  CHECK(g.in.window_end[2] - g.in.window_start[2] == 69);
  CHECK(g.in.window_end[3] - g.in.window_start[3] == 70);
  CHECK(g.in.window_start[4] == 70);
  CHECK(g.in.window_end[5] - g.in.window_start[5] == 5);
  // Key 65 of request 1 (page 1, slot 1) is the cache's bytes there.
  const int blk = d.block_table[1 * 4 + 1];
  CHECK(g.in.k[size_t(65) * 128] ==
        ops::decode_values(ops::DType::E4M3, &d.cache[size_t(blk) * kPageBytes + 128], 1)[0]);
  float s;
  std::memcpy(&s, &d.cache[size_t(blk) * kPageBytes + kPageKeyBytes + 4], 4);
  CHECK(g.in.kscale[65] == s);
  // The empty request: no keys, all -1 after padding; the others: min(k, visible) positions.
  CHECK(ops::paged_reference_row(p, g, 0).empty());
  const std::vector<int64_t> r2 = ops::paged_reference_row(p, g, 2);
  REQUIRE(r2.size() == 8);
  for (int64_t t : r2) CHECK((t >= 0 && t < 69));
  CHECK(ops::paged_reference_row(p, g, 4).size() == 4);  // 5 - 2 + 1 + 0
  // The reference accepts its own answer and refuses a changed one.
  std::vector<int> row(8, -1);
  for (size_t i = 0; i < r2.size(); ++i) row[i] = int(r2[i]);
  CHECK(ops::paged_row_matches(p, g, 2, row.data()));
  std::vector<int> empty(8, -1);
  CHECK(ops::paged_row_matches(p, g, 0, empty.data()));
  CHECK_FALSE(ops::paged_row_matches(p, g, 2, empty.data()));
}

TEST_CASE("paged decode reference: heavy ties go to the smaller position", "[ref][decode]") {
  auto p = decode_problem(2, 4, 1, 1, 2);
  std::mt19937_64 rng(test::test_seed());
  ops::PagedDataOptions opt;
  opt.levels = 1;  // every element 0: every score 0
  ops::PagedHostData d = ops::random_paged_data(p, {100}, rng, opt);
  std::fill(d.q.begin(), d.q.end(), 0);
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  CHECK(ops::paged_reference_row(p, g, 0) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("paged decode reference: B x next_n lengths equal the per-request rule", "[ref][decode]") {
  auto p = decode_problem(4, 16, 3, 4, 3);
  std::mt19937_64 rng(test::test_seed());
  const std::vector<int> lens = {1, 64, 130, 2};
  std::mt19937_64 rng2 = rng;
  ops::PagedHostData a = ops::random_paged_data(p, lens, rng);
  ops::PagedDataOptions per;
  per.lens_per_query = true;
  ops::PagedHostData b = ops::random_paged_data(p, lens, rng2, per);
  const ops::GatheredDecode ga = ops::gather_decode(p, a), gb = ops::gather_decode(p, b);
  for (int64_t row = 0; row < 12; ++row)
    CHECK(ops::paged_reference_row(p, ga, row) == ops::paged_reference_row(p, gb, row));
}

TEST_CASE("paged decode reference: bad requests give empty rows", "[ref][decode]") {
  auto p = decode_problem(4, 8, 1, 3, 2);
  std::mt19937_64 rng(test::test_seed());
  ops::PagedHostData d = ops::random_paged_data(p, {10, 20, 30}, rng);
  d.context_lens[0] = 129;              // above max_blocks_per_seq * 64
  d.context_lens[1] = -1;               // negative
  d.block_table[2 * 2] = int(d.num_blocks);  // outside the cache
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  for (int r = 0; r < 3; ++r) {
    CHECK(g.bad[r]);
    CHECK(ops::paged_reference_row(p, g, r).empty());
  }
}

TEST_CASE("paged decode problems are checked with messages", "[decode]") {
  auto p = decode_problem(64, 2048, 5, 8, 16);
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("next_n = 5"));
  p = decode_problem(64, 0, 1, 8, 16);
  CHECK_THROWS_AS(ops::PagedTopkOp::create(p, nullptr), ops::InvalidArgument);
  p = decode_problem(64, 8193, 1, 8, 16);
  CHECK_THROWS_AS(ops::PagedTopkOp::create(p, nullptr), ops::InvalidArgument);
  p = decode_problem(64, 2048, 1, 8, 0);
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("max_blocks_per_seq"));
  p = decode_problem(64, 2048, 1, 1024, 1 << 16);
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("max_total_keys"));
  p.max_total_keys = 1 << 24;
  CHECK_NOTHROW(ops::PagedTopkOp::create(p, nullptr));
}

TEST_CASE("paged decode tensors are checked with messages", "[decode]") {
  auto p = decode_problem(64, 2048, 2, 8, 16);
  alignas(256) static unsigned char mem[1 << 16];
  ops::PagedInputs in;
  in.q = ops::contiguous_view(mem, ops::DType::E4M3, {4, 2, 64, 128});
  in.cache = ops::contiguous_view(mem, ops::DType::U8, {10, 64, 1, 132});
  in.block_table = ops::contiguous_view(mem, ops::DType::I32, {4, 16});
  in.context_lens = ops::contiguous_view(mem, ops::DType::I32, {4});
  in.weights = ops::contiguous_view(mem, ops::DType::F32, {8, 64});
  ops::TensorView out = ops::contiguous_view(mem, ops::DType::I32, {8, 2048});
  CHECK(ops::validate_paged_call(p, 0, in, &out) == 4);
  in.context_lens = ops::contiguous_view(mem, ops::DType::I32, {4, 2});
  CHECK(ops::validate_paged_call(p, 0, in, &out) == 4);
  auto refused = [&](ops::PagedInputs bad, const char* what) {
    CHECK_THROWS_WITH(ops::validate_paged_call(p, 0, bad, &out), Catch::Contains(what));
  };
  ops::PagedInputs b = in;
  b.q = ops::contiguous_view(mem, ops::DType::E4M3, {9, 2, 64, 128});
  refused(b, "max_batch");
  b = in;
  b.q = ops::contiguous_view(mem, ops::DType::E4M3, {4, 3, 64, 128});
  refused(b, "next_n");
  b = in;
  b.q.dtype = ops::DType::BF16;
  refused(b, "q: dtype");
  b = in;
  b.cache = ops::contiguous_view(mem, ops::DType::U8, {10, 64, 1, 128});
  refused(b, "cache: shape[3]");
  b = in;
  b.cache.strides[0] = 9000;
  refused(b, "8448");
  b = in;
  b.cache.dtype = ops::DType::E4M3;
  refused(b, "cache: dtype");
  b = in;
  b.block_table = ops::contiguous_view(mem, ops::DType::I32, {4, 15});
  refused(b, "max_blocks_per_seq");
  b = in;
  b.block_table = ops::contiguous_view(mem, ops::DType::I32, {3, 16});
  refused(b, "block_table: shape[0]");
  b = in;
  b.context_lens = ops::contiguous_view(mem, ops::DType::I32, {4, 3});
  refused(b, "context_lens: shape[1]");
  b = in;
  b.context_lens = {};
  refused(b, "context_lens missing");
  b = in;
  b.q.strides[0] = 3 * b.q.strides[1];
  refused(b, "queries of a request must follow each other");
  CHECK_THROWS_WITH(ops::validate_paged_call(p, 0, in, nullptr), Catch::Contains("out_indices"));
}

TEST_CASE("paged decode compiles for sm_90a and sm_100a without a GPU", "[nvrtc][decode]") {
  const char* arch = GENERATE("sm_90a", "sm_100a");
  INFO(arch);
  test::ScopedEnv gather("WINNOW_PAGED_STREAM", "0");  // the gathered path's modules, in any suite
  auto p = decode_problem(64, 2048, 2, 64, 1024);
  p.arch = backend::parse_arch(arch);
  auto op = ops::PagedTopkOp::create(p, nullptr);
  CHECK_THAT(op->gather_source(), Catch::Contains("winnow_paged_gather"));
  CHECK_THAT(op->gather_source(), Catch::Contains("winnow_paged_windows"));
  CHECK(op->topk().problem().window == ops::WindowKind::Ranges);
  CHECK(op->capacity() == int64_t(64) * 1024 * 64);
  rt::CubinCache cache(std::nullopt);
  auto be = backend::make_nvrtc_backend();
  op->build(cache, *be);
  REQUIRE(op->built());
  CHECK(std::string(op->gather_cubin().data() + 1, 3) == "ELF");
  CHECK(std::string(op->topk().cubin().data() + 1, 3) == "ELF");
  CHECK_THROWS_AS(op->workspace_bytes(), ops::NotBuilt);  // no device: not loaded
}

using test::check_paged_on_gpu;

TEST_CASE("paged decode equals the reference: lengths 0, 1, < k, = k, not multiples of 64",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  const int next_n = GENERATE(1, 2, 3, 4);
  const int k = GENERATE(1, 2048);
  INFO("next_n " << next_n << " k " << k);
  auto p = decode_problem(64, k, next_n, 12, 80);
  check_paged_on_gpu(p, {0, 1, 2, 63, 64, 65, k - 1, k, k + 1, 3000, 5119, 5120});
}

TEST_CASE("paged decode equals the reference: random lengths, ties, NaN, B x next_n lengths",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  const int next_n = GENERATE(1, 2, 4);
  INFO("next_n " << next_n);
  auto p = decode_problem(64, 2048, next_n, 16, 128);
  check_paged_on_gpu(p, random_lens(16, 8192, rng));
  ops::PagedDataOptions ties;
  ties.levels = 3;
  check_paged_on_gpu(p, random_lens(16, 8192, rng), ties);
  ops::PagedDataOptions nan;
  nan.nan_fraction = 0.01;
  check_paged_on_gpu(p, random_lens(16, 8192, rng), nan);
  ops::PagedDataOptions per;
  per.lens_per_query = true;
  check_paged_on_gpu(p, random_lens(16, 8192, rng), per);
}

TEST_CASE("paged decode equals the reference: one long request, key splits, H = 32",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  auto p = decode_problem(32, 2048, 1, 4, 4096);
  check_paged_on_gpu(p, {int(test::sized(200000, 20000)), 1000, 0, 64});
}
