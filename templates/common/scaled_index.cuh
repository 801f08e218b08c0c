// floor(i n / d) in 32-bit arithmetic, for the kernels' even splits (the strided sample's
// keys, a stream CTA's share of the pages, the sampled pages). Device code has no 64-bit
// division: under nvJitLink's link mode (the LLVM backend) one is a call of the extern
// routine __cuda_sm20_div_s64, and ptxas then serialises the calling kernel's wgmma
// (warning C7509).
#pragma once
#include "common/portable.cuh"

namespace winnow {

// The largest divisor scaled_index takes: i r < d^2 <= 2^32 below.
inline constexpr unsigned kMaxScaledIndexDivisor = 65536;

// floor(i n / d) for 0 <= i <= d, 0 < d <= kMaxScaledIndexDivisor and n < 2^31 (the result is
// at most n). With n = q d + r: i n / d = i q + i r / d, where i q <= n and i r < d^2.
WINNOW_HD int scaled_index(int i, int n, int d) {
  const u32 ui = u32(i), un = u32(n), ud = u32(d);
  const u32 q = un / ud, r = un % ud;
  return int(ui * q + (ui * r) / ud);
}

}  // namespace winnow
