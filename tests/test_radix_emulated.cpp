// radix_kth (templates/select/radix_select.cuh) run on the CPU (tests/emu/cuda_emulation.h): the
// order-key-only form (LowestShift 32, the knn threshold's and the topk sample's since
// session 11: 4 radix passes, not 8) must give the order key of the k-th largest RankKey,
// the same as the whole-key form and a CPU sort, on heavy ties and on distinct keys.

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "support.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "knn/knn_select.cuh"

using namespace winnow;

namespace {

struct EmuCta {
  static constexpr int kThreads = 64;
};

// radix_kth<EmuCta, Lowest> over the RankKeys of `keys` (order keys, index = position).
template <int Lowest>
u64 emulated_kth(const std::vector<u32>& keys, u32 k) {
  std::vector<unsigned char> smem(size_t(knn_select_smem_bytes(1)) + 64);
  u64 result = 0;
  winnow_emu::launch(1, 1, EmuCta::kThreads, [&] {
    const KnnSelectSmem s(smem.data());
    const int n = int(keys.size());
    const u64 kth = radix_kth<EmuCta, Lowest>(s, k, [&](auto f) {
      for (int i = threadIdx.x; i < n; i += EmuCta::kThreads) f(rank_key(keys[i], i));
    });
    if (threadIdx.x == 0) result = kth;
  });
  return result;
}

}  // namespace

TEST_CASE("radix select: the order-key-only passes give the k-th largest's order key", "[emu]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int levels = GENERATE(3, 1000, 0);  // 0: distinct-ish keys over the whole range
  INFO("levels " << levels);
  std::vector<u32> keys(777);
  for (u32& v : keys) v = levels ? u32(rng() % levels) * 0x01010101u + 1u : u32(rng() >> 32) | 1u;
  std::vector<u64> ranked;
  for (size_t i = 0; i < keys.size(); ++i) ranked.push_back(rank_key(keys[i], int(i)));
  std::sort(ranked.begin(), ranked.end(), std::greater<u64>());
  for (u32 k : {1u, 2u, 100u, 500u, 777u}) {
    INFO("k " << k);
    const u64 whole = emulated_kth<0>(keys, k);
    const u64 order_only = emulated_kth<32>(keys, k);
    CHECK((order_only & 0xFFFFFFFFull) == 0);
    CHECK((order_only >> 32) == (ranked[k - 1] >> 32));
    CHECK((whole >> 32) == (ranked[k - 1] >> 32));
    // At least k RankKeys at or above the order-key-only threshold, as its callers need.
    CHECK(std::count_if(ranked.begin(), ranked.end(), [&](u64 v) { return v >= order_only; }) >= k);
  }
}
