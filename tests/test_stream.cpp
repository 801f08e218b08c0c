// The sampling rules (hint entries, strided keys), the sample hint's validation, and the
// streaming driver's chunk arithmetic: CPU only.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "compiler/ir/ir.h"
#include "ops/topk/stream_topk.h"
#include "ops/common/validate.h"
#include "topk_check.h"
#include "topk/sample_keys.cuh"
#include "common/scaled_index.cuh"

using Catch::Matchers::Contains;
using namespace winnow;

TEST_CASE("is_strided_sample_key is true exactly on the strided sample", "[stream]") {
  for (int n : {1, 7, 100, 4096, 5003}) {
    for (int ns : {0, 1, 3, 64, 100, 4096}) {
      if (ns > n) continue;
      const int start = 37;
      std::set<int> keys;
      for (int i = 0; i < ns; ++i) keys.insert(strided_sample_key(i, start, n, ns));
      CHECK(int(keys.size()) == ns);  // distinct keys
      for (int key = start - 2; key < start + n + 2; ++key) {
        INFO("n " << n << " ns " << ns << " key " << key);
        REQUIRE(is_strided_sample_key(key, start, n, ns) == (keys.count(key) == 1));
      }
    }
  }
  // Large windows: the 64-bit products do not overflow.
  const int n = 2000000000, ns = 4096;
  CHECK(is_strided_sample_key(strided_sample_key(4095, 0, n, ns), 0, n, ns));
  CHECK_FALSE(is_strided_sample_key(strided_sample_key(4095, 0, n, ns) + 1, 0, n, ns));
}

TEST_CASE("the 32-bit sample arithmetic equals the 64-bit formulas", "[stream]") {
  // scaled_index and the strided sample replace 64-bit divisions in device code
  // (templates/common/scaled_index.cuh); fresh random windows up to 2^31 - 1 and divisors up to
  // 65536, and the edges.
  std::mt19937_64 rng(winnow::test::test_seed() ^ 0x5ca1edu);
  auto draw = [&](long long lo, long long hi) {
    return std::uniform_int_distribution<long long>(lo, hi)(rng);
  };
  auto floor64 = [](long long i, long long n, long long d) { return int(i * n / d); };
  for (int t = 0; t < 3000; ++t) {
    const int n = int(t % 3 == 0 ? INT32_MAX - draw(0, 3) : draw(1, INT32_MAX));
    const int d = int(t % 5 == 0 ? 65536 - draw(0, 1) : draw(1, 65536));
    for (int i : {0, 1, d / 2, d - 1, d, int(draw(0, d))}) {
      INFO("i " << i << " n " << n << " d " << d);
      REQUIRE(scaled_index(i, n, d) == floor64(i, n, d));
    }
    if (d > n) continue;
    // Key offsets of the strided sample, and the membership test on them and beside them.
    const int start = int(draw(0, INT32_MAX - n));
    for (int i : {0, d - 1, int(draw(0, d - 1))}) {
      const int key = strided_sample_key(i, start, n, d);
      INFO("i " << i << " start " << start << " n " << n << " ns " << d);
      REQUIRE(key == start + floor64(i, n, d));
      REQUIRE(is_strided_sample_key(key, start, n, d));
      // The key before it is a sample key exactly when the sample's i-1-th lands on it.
      if (i > 0 && key - 1 >= start) {
        const bool before = strided_sample_key(i - 1, start, n, d) == key - 1;
        REQUIRE(is_strided_sample_key(key - 1, start, n, d) == before);
      }
      if (i + 1 < d || key + 1 < start + n) {
        const bool after = i + 1 < d && strided_sample_key(i + 1, start, n, d) == key + 1;
        REQUIRE(is_strided_sample_key(key + 1, start, n, d) == after);
      }
    }
  }
}

TEST_CASE("hint entries count once, only keys below num_keys, ascending", "[stream]") {
  // The kernel's rule over a whole hint: an entry counts when above the running maximum
  // of the entries that counted.
  auto counted = [](const std::vector<int>& hint, int num_keys) {
    std::vector<int> out;
    int running = -1;
    for (int key : hint) {
      if (hint_entry_counts(key, running, num_keys)) {
        out.push_back(key);
        running = key;
      }
    }
    return out;
  };
  CHECK(counted({1, 5, 9}, 10) == std::vector<int>{1, 5, 9});
  CHECK(counted({-1, 3, 3, 2, 10, 11, 4}, 10) == std::vector<int>{3, 4});
  CHECK(counted({9, 1, 2}, 10) == std::vector<int>{9});
  CHECK(counted({-5, -1, 100}, 10).empty());
  CHECK(counted({}, 10).empty());
}

TEST_CASE("plan_chunks: even chunks of whole row blocks, within int32 rows", "[stream]") {
  SECTION("default: kChunkWaves waves of the grid") {
    const ops::ChunkPlan c = ops::plan_chunks(1 << 20, 0, 2, 132);
    CHECK(c.chunk_rows % 2 == 0);
    CHECK(c.chunk_rows <= ops::kChunkWaves * 2 * 132);
    CHECK(c.chunks == (int64_t(1 << 20) + ops::kChunkWaves * 264 - 1) / (ops::kChunkWaves * 264));
    CHECK(c.chunks * c.chunk_rows >= (1 << 20));
    CHECK((c.chunks - 1) * c.chunk_rows < (1 << 20));  // no empty chunk
  }
  SECTION("requested rows, evened out") {
    const ops::ChunkPlan c = ops::plan_chunks(1000, 300, 4, 10);
    CHECK(c.chunks == 4);
    CHECK(c.chunk_rows == 252);  // 250 rounded up to whole blocks of 4
    CHECK((c.chunks - 1) * c.chunk_rows < 1000);
  }
  SECTION("fewer rows than one chunk: one launch") {
    const ops::ChunkPlan c = ops::plan_chunks(5, 0, 16, 132);
    CHECK(c.chunks == 1);
    CHECK(c.chunk_rows == 16);
  }
  SECTION("no rows: no launch") {
    CHECK(ops::plan_chunks(0, 0, 2, 132).chunks == 0);
  }
  SECTION("huge requests stay below 2^31 rows per launch") {
    const ops::ChunkPlan c = ops::plan_chunks(int64_t(3) << 31, int64_t(1) << 40, 16, 1);
    CHECK(c.chunk_rows <= INT32_MAX);
    CHECK(c.chunk_rows % 16 == 0);
    CHECK(c.chunks * c.chunk_rows >= (int64_t(3) << 31));
  }
  SECTION("every chunk count covers the rows exactly once") {
    for (int64_t rows : {1, 2, 3, 255, 256, 257, 100000, 1048576}) {
      for (int64_t req : {0, 1, 7, 1000, 65536}) {
        const ops::ChunkPlan c = ops::plan_chunks(rows, req, 2, 132);
        INFO("rows " << rows << " requested " << req);
        CHECK(c.chunk_rows >= 1);
        CHECK(c.chunks * c.chunk_rows >= rows);
        CHECK((c.chunks - 1) * c.chunk_rows < rows);
      }
    }
  }
}

TEST_CASE("a workspace bound keeps the CTAs within it", "[stream]") {
  // The streaming driver passes max_workspace_bytes to the per-chunk op unchanged (it
  // needs nothing besides); the op keeps as many CTAs as fit.
  const size_t per_cta = 82000, fixed = 256;
  for (size_t bound : {size_t(0), size_t(1000), size_t(82256), size_t(1) << 20,
                       size_t(512) << 20}) {
    const int ctas = ops::ctas_within_workspace(bound, 132, per_cta, fixed);
    INFO("bound " << bound << " ctas " << ctas);
    CHECK(ctas <= 132);
    if (bound == 0) CHECK(ctas == 132);
    if (bound != 0) CHECK(fixed + size_t(ctas) * per_cta <= std::max(bound, fixed));
    if (bound != 0 && bound < fixed + per_cta) CHECK(ctas == 0);
  }
}

namespace {

ops::TopkProblem csa_problem() {
  ops::TopkProblem p = test::relu_mh_problem(64, 512, ops::DType::BF16);
  p.score = ir::relu_mh(false);
  p.window = ops::WindowKind::Causal;
  p.causal_ratio = 4;
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

void* fake(uintptr_t a) { return reinterpret_cast<void*>(a); }

}  // namespace

TEST_CASE("sample hint: dtype, shape, length and mode are checked", "[stream]") {
  ops::TopkProblem p = csa_problem();
  const int64_t rows = 64, keys = 16;
  ops::TopkInputs in;
  in.q = ops::contiguous_view(fake(0x100000), ops::DType::BF16, {rows, 64, 128});
  in.k = ops::contiguous_view(fake(0x200000), ops::DType::BF16, {keys, 128});
  in.weights = ops::contiguous_view(fake(0x300000), ops::DType::F32, {rows, 64});
  ops::TensorView out = ops::contiguous_view(fake(0x400000), ops::DType::I32, {rows, 512});
  auto call = [&](int64_t max_hint) {
    return ops::validate_call(p, 0, in, &out, nullptr, nullptr, 0, 0, -1, max_hint);
  };
  in.sample_hint = ops::contiguous_view(fake(0x500000), ops::DType::I32, {512});
  CHECK_NOTHROW(call(2048));
  CHECK_THROWS_WITH(call(100), Contains("sample_hint: shape[0] is 512, the maximum is 100"));
  in.sample_hint = ops::contiguous_view(fake(0x500000), ops::DType::F32, {512});
  CHECK_THROWS_WITH(call(2048), Contains("sample_hint: dtype is fp32, expected int32"));
  in.sample_hint = ops::contiguous_view(fake(0x500000), ops::DType::I32, {2, 256});
  CHECK_THROWS_WITH(call(2048), Contains("sample_hint: ndim is 2"));
  in.sample_hint = ops::contiguous_view(nullptr, ops::DType::I32, {512});
  CHECK_THROWS_WITH(call(2048), Contains("sample_hint: data is null"));
  in.sample_hint = ops::contiguous_view(fake(0x500000), ops::DType::I32, {512});
  in.sample_hint.strides[0] = 2;
  CHECK_THROWS_WITH(call(2048), Contains("sample_hint: strides[0] is 2"));
  // A per-call causal offset is checked as the problem's would be.
  in.sample_hint = {};
  CHECK_NOTHROW(ops::validate_call(p, 0, in, &out, nullptr, nullptr, 0, 0, 0, -1));
  CHECK_THROWS_WITH(ops::validate_call(p, 0, in, &out, nullptr, nullptr, 0, 0, 4, -1),
                    Contains("past num_keys"));
  // Materialize mode has no sample.
  p.mode = ops::Mode::Materialize;
  in.sample_hint = ops::contiguous_view(fake(0x500000), ops::DType::I32, {512});
  ops::TensorView scores = ops::contiguous_view(fake(0x600000), ops::DType::F32, {rows, keys});
  CHECK_THROWS_WITH(ops::validate_call(p, 0, in, nullptr, &scores, nullptr, 0, 0, -1, 0),
                    Contains("materialize mode takes no sample"));
}

TEST_CASE("the streaming driver refuses materialize mode and negative chunk rows", "[stream]") {
  ops::StreamProblem sp;
  sp.topk = csa_problem();
  sp.chunk_rows = -1;
  CHECK_THROWS_WITH(ops::StreamTopk::create(sp, nullptr), Contains("chunk_rows = -1"));
  sp.chunk_rows = 0;
  sp.topk.mode = ops::Mode::Materialize;
  CHECK_THROWS_WITH(ops::StreamTopk::create(sp, nullptr), Contains("top-k mode only"));
  sp.topk.mode = ops::Mode::TopK;
  auto s = ops::StreamTopk::create(sp, nullptr);
  CHECK_THROWS_AS(s->workspace_bytes(), ops::NotBuilt);
}
