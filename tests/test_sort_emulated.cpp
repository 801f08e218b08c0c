// sort_desc_registers (templates/bitonic_sort.cuh: the bitonic network with each thread's
// 8 entries in registers and transposes through shared memory, the retrieval mode's select
// at k >= 2048) run on the CPU (tests/emu/cuda_emulation.h): its list must equal a CPU sort
// and sort_desc's, descending by RankKey and by index, on distinct keys and heavy ties, with
// the CTA wider than the n / 8 threads that sort.
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "support.h"
// The emulation goes before the device templates (and after every other header).
#include "emu/cuda_emulation.h"
#include "winnow/bitonic_sort.cuh"
#include "winnow/rank_order.cuh"

using namespace winnow;

namespace {

struct EmuCta {
  static constexpr int kThreads = 256;
};

// The list sorted by sort_desc_registers (registers) or sort_desc, in emulated shared memory.
template <int M>
std::vector<u64> emulated_sort(const std::vector<u64>& in, bool by_index, bool registers) {
  std::vector<u64> v = in;
  winnow_emu::launch(1, 1, EmuCta::kThreads, [&] {
    if (registers) {
      sort_desc_registers<EmuCta, M>(v.data(), by_index);
    } else {
      sort_desc<EmuCta>(v.data(), 1 << M, by_index);
    }
  });
  return v;
}

template <int M>
void check_sorts(std::mt19937_64& rng, int levels) {
  constexpr int N = 1 << M;
  // RankKeys of distinct indices (the select's list: every entry distinct), zeros for the
  // slots past the chosen entries as the select pads them.
  std::vector<u64> in(N, 0ull);
  const int real = N - int(rng() % (N / 4));
  std::vector<int> index(1 << 20);
  for (int i = 0; i < int(index.size()); ++i) index[i] = i;
  std::shuffle(index.begin(), index.end(), rng);
  for (int i = 0; i < real; ++i) {
    const u32 ok = levels ? u32(rng() % levels) * 0x01010101u + 1u : u32(rng() >> 32) | 1u;
    in[i] = rank_key(ok, index[i]);
  }
  std::shuffle(in.begin(), in.end(), rng);
  for (bool by_index : {false, true}) {
    INFO("n " << N << " levels " << levels << " by_index " << by_index);
    auto order = [by_index](u64 x) { return by_index ? ((x << 32) | (x >> 32)) : x; };
    std::vector<u64> want = in;
    std::sort(want.begin(), want.end(), [&](u64 a, u64 b) { return order(a) > order(b); });
    const std::vector<u64> got = emulated_sort<M>(in, by_index, true);
    CHECK(got == want);
    CHECK(emulated_sort<M>(in, by_index, false) == want);
  }
}

}  // namespace

TEST_CASE("bitonic sort in registers equals a CPU sort and the memory network", "[emu]") {
  const uint64_t seed = test::test_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int levels : {0, 3, 1000}) {  // 0: distinct-ish order keys over the whole range
    check_sorts<8>(rng, levels);     // 32 of the CTA's 256 threads sort
    check_sorts<11>(rng, levels);    // all 256
  }
}
