// The rank order, bins and element decoding of templates/, compiled for the host.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "testing/host_data.h"
#include "support.h"
#include "compiler/ir/ir.h"
#include "common/element_decode.cuh"
#include "common/float_minmax.cuh"
#include "select/rank_order.cuh"

using namespace winnow;

TEST_CASE("order keys rank NaN first, then descending, with -0 equal to +0", "[ref]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(order_key(nan) > order_key(inf));
  CHECK(order_key(-nan) == order_key(nan));
  CHECK(order_key(inf) > order_key(3.0f));
  CHECK(order_key(3.0f) > order_key(2.5f));
  CHECK(order_key(0.0f) == order_key(-0.0f));
  CHECK(order_key(-1.0f) > order_key(-2.0f));
  CHECK(order_key(-2.0f) > order_key(-inf));
  std::mt19937_64 rng(test::test_seed());
  std::normal_distribution<float> d(0.0f, 100.0f);
  for (int i = 0; i < 100000; ++i) {
    float a = d(rng), b = d(rng);
    INFO(a << " vs " << b);
    REQUIRE((a > b) == (order_key(a) > order_key(b)));
    REQUIRE(order_key_score(order_key(a)) == a);
  }
  CHECK(std::isnan(order_key_score(order_key(nan))));
}

TEST_CASE("rank keys break ties by the smaller index", "[ref]") {
  CHECK(rank_key(order_key(1.0f), 5) > rank_key(order_key(1.0f), 6));
  CHECK(rank_key(order_key(1.5f), 900) > rank_key(order_key(1.0f), 0));
  CHECK(rank_key_index(rank_key(order_key(2.0f), 123456)) == 123456);
  CHECK(rank_key_order(rank_key(order_key(2.0f), 7)) == order_key(2.0f));
}

TEST_CASE("threshold bins are monotone and bin 0 is below lo", "[ref]") {
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<u32> u;
  for (int t = 0; t < 50; ++t) {
    u32 lo = u(rng), hi = u(rng);
    if (lo > hi) std::swap(lo, hi);
    ThresholdBins b = make_threshold_bins(lo, hi, 2048);
    CHECK(b.bin(hi) <= 2046);
    if (lo > 0) CHECK(b.bin(lo - 1) == 0);
    CHECK(b.bin(lo) == 1);
    for (int i = 0; i < 2000; ++i) {
      u32 x = u(rng), y = u(rng);
      if (x > y) std::swap(x, y);
      REQUIRE(b.bin(x) <= b.bin(y));
    }
  }
  ThresholdBins all = make_threshold_bins(0, 0xFFFFFFFFu, 2048);
  CHECK(all.bin(0xFFFFFFFFu) < 2048);
  CHECK(all.bin(0) == 1);
}

// The filter's float pre-test (topk_kernel.cuh): a score whose bin reaches the gate never
// compares below the gate's edge score, for every float (NaN, infinities, -0, subnormals)
// and every gate; and the edge is tight where it can be (a score one step below the edge's
// own order key falls below the gate).
TEST_CASE("a gate's edge score never excludes a score at or above the gate", "[ref]") {
  std::mt19937_64 rng(test::test_seed());
  std::uniform_int_distribution<u32> u;
  std::uniform_int_distribution<int> bins(3, 4096);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, -nan, inf, -inf, 0.0f, -0.0f, 1e-45f, -1e-45f,
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  int tight = 0;
  for (int t = 0; t < 400; ++t) {
    // Bins over random spans, some ending in the NaN keys, some spanning every key.
    u32 lo = u(rng), hi = u(rng);
    if (lo > hi) std::swap(lo, hi);
    if (t % 10 == 0) { lo = 0; hi = 0xFFFFFFFFu; }
    if (t % 10 == 1) hi = 0xFFFFFFFFu;
    const int count = bins(rng);
    const ThresholdBins b = make_threshold_bins(lo, hi, count);
    for (int gate : {0, 1, 2, count / 2, count - 2, count - 1, int(u(rng) % u32(count))}) {
      const float edge = gate_edge_score(b, gate);
      INFO("lo " << lo << " hi " << hi << " count " << count << " gate " << gate << " edge " << edge);
      auto check = [&](float s) {
        if (b.bin(order_key(s)) >= gate) REQUIRE_FALSE(s < edge);
      };
      for (float s : specials) check(s);
      for (int i = 0; i < 300; ++i) check(bits_float(u(rng)));
      // Scores at the bin edges, one order key either side.
      if (gate >= 1) {
        const unsigned long long e = (unsigned long long)lo + ((unsigned long long)(gate - 1) << b.shift);
        for (long long d = -2; d <= 2; ++d) {
          const long long k = (long long)e + d;
          if (k < 0 || k > 0xFFFFFFFFll) continue;
          const float s = order_key_score(u32(k));
          check(s);
          if (d == -1 && !std::isnan(s) && b.bin(order_key(s)) < gate && s < edge) ++tight;
        }
      }
    }
  }
  CHECK(tight > 100);  // the edge is the bin's own lower edge, not a loose bound
}

TEST_CASE("fp8 e4m3, fp16 and bf16 decode exactly and encode to the nearest", "[ref]") {
  CHECK(decode_e4m3(0x38) == 1.0f);
  CHECK(decode_e4m3(0x7E) == 448.0f);
  CHECK(decode_e4m3(0xFE) == -448.0f);
  CHECK(decode_e4m3(0x01) == std::ldexp(1.0f, -9));
  CHECK(std::isnan(decode_e4m3(0x7F)));
  CHECK(decode_f16(0x3C00) == 1.0f);
  CHECK(decode_f16(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(decode_f16(0x7C00)));
  CHECK(decode_bf16(0x3F80) == 1.0f);
  CHECK(decode_e4m3(ops::encode_e4m3(1000.0f)) == 448.0f);
  CHECK(decode_e4m3(ops::encode_e4m3(1.0625f)) == 1.0f);  // tie goes to the even code
  std::mt19937_64 rng(test::test_seed());
  std::normal_distribution<float> d(0.0f, 4.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = d(rng);
    float e8 = decode_e4m3(ops::encode_e4m3(x));
    float h = decode_f16(ops::encode_f16(x));
    float b = decode_bf16(ops::encode_bf16(x));
    INFO(x);
    REQUIRE(std::abs(e8 - x) <= std::abs(x) * 0.0625f + std::ldexp(1.0f, -10));
    REQUIRE(std::abs(h - x) <= std::abs(x) * std::ldexp(1.0f, -11) + std::ldexp(1.0f, -25));
    REQUIRE(std::abs(b - x) <= std::abs(x) * std::ldexp(1.0f, -8));
  }
}

TEST_CASE("fp16 encoding: every half, both sides of every midpoint, ties to even, saturation",
          "[ref]") {
  // Exhaustive over the 63488 finite halves in ascending order (the property, not a copy
  // of the encoder): each value encodes to its own code (-0 to +0), a float just below or
  // above the midpoint of two neighbours to the nearer one, the midpoint to the even code.
  std::vector<std::pair<float, uint16_t>> halves;
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float v = decode_f16(uint16_t(c));
    if (std::isfinite(v) && c != 0x8000) halves.emplace_back(v, uint16_t(c));
  }
  std::sort(halves.begin(), halves.end());
  REQUIRE(halves.size() == 63487);
  int64_t bad = 0;
  for (size_t i = 0; i < halves.size(); ++i) {
    const auto [v, c] = halves[i];
    bad += ops::encode_f16(v) != c;
    if (i + 1 == halves.size()) break;
    const auto [w, d] = halves[i + 1];
    const float mid = float((double(v) + double(w)) / 2);  // exact: halves have 11 bits
    bad += ops::encode_f16(std::nextafter(mid, v)) != c;
    bad += ops::encode_f16(std::nextafter(mid, w)) != d;
    bad += ops::encode_f16(mid) != ((c & 1) ? d : c);
  }
  CHECK(bad == 0);
  CHECK(ops::encode_f16(-0.0f) == 0);
  CHECK(ops::encode_f16(-1e-9f) == 0);  // rounds to zero: +0, as -0 does
  CHECK(ops::encode_f16(1e9f) == 0x7BFF);  // saturates at 65504
  CHECK(ops::encode_f16(-65520.0f) == 0xFBFF);
  CHECK(ops::encode_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(ops::encode_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(std::isnan(decode_f16(ops::encode_f16(std::nanf("")))));
}

TEST_CASE("device max and min follow the IR's IEEE maximum/minimum, -0 < +0, to the bit",
          "[ref]") {
  using winnow::ir::EvalInputs;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, 1e-45f, -1e-45f,
                          std::numeric_limits<float>::quiet_NaN(), 3.5f, -2.25f};
  std::mt19937_64 rng(winnow::test::test_seed());
  std::uniform_real_distribution<float> any(-10.0f, 10.0f);
  for (int i = 0; i < 40; ++i) v.push_back(any(rng));
  const winnow::ir::Expr mx = winnow::ir::parse("max(dot(0), dot(1))");
  const winnow::ir::Expr mn = winnow::ir::parse("min(dot(0), dot(1))");
  for (float a : v) {
    for (float b : v) {
      INFO(a << " " << b);
      const double dots[] = {double(a), double(b)};
      const EvalInputs in{dots, nullptr, 1.0, nullptr, 0.0, 2};
      const float want_max = float(winnow::ir::eval(mx, in));
      const float want_min = float(winnow::ir::eval(mn, in));
      const float got_max = winnow::ieee_maximum(a, b), got_min = winnow::ieee_minimum(a, b);
      if (want_max != want_max) {
        CHECK(got_max != got_max);
        CHECK(got_min != got_min);
        continue;
      }
      CHECK(winnow::float_bits(got_max) == winnow::float_bits(want_max));
      CHECK(winnow::float_bits(got_min) == winnow::float_bits(want_min));
      CHECK(winnow::float_bits(got_max) == winnow::float_bits(winnow::ieee_maximum(b, a)));
      CHECK(winnow::float_bits(got_min) == winnow::float_bits(winnow::ieee_minimum(b, a)));
    }
  }
}
