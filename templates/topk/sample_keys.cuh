// Which keys make up a row's sample (the first pass that sets the initial gate). The
// sample's k-th best is a safe lower bound of the row's only when its keys are distinct
// and inside the row's window, so both rules live here, for the kernel and the CPU tests.
// Both in 32-bit arithmetic (no 64-bit division in device code: scaled_index.cuh), exact
// for windows n < 2^31 and ns <= kMaxStridedSample keys.
#pragma once
#include "common/portable.cuh"
#include "common/scaled_index.cuh"

namespace winnow {

// The most strided sample keys of a window (ops/common/validate.h's kMaxSampleSize).
inline constexpr int kMaxStridedSample = int(kMaxScaledIndexDivisor);

// The i-th (0 <= i < ns) of the ns strided sample keys of the window [start, start + n)
// (0 < ns <= n): start + floor(i n / ns).
WINNOW_HD int strided_sample_key(int i, int start, int n, int ns) {
  return start + scaled_index(i, n, ns);
}

// Whether `key` of [start, start + n) is one of the ns strided sample keys: some i in
// [0, ns) has floor(i n / ns) = x. The smallest i whose key offset is at least x, from a
// floating-point estimate of x ns / n moved by exact steps (offsets rise with i), then
// whether that i lands on x.
WINNOW_HD bool is_strided_sample_key(int key, int start, int n, int ns) {
  if (ns <= 0 || n <= 0 || key < start || key - start >= n) return false;
  const int x = key - start;
  auto offset = [&](int i) { return strided_sample_key(i, 0, n, ns); };
#if defined(__CUDA_ARCH__)
  const float e = __fdividef(float(x) * float(ns), float(n));  // no IEEE division routine
#else
  const float e = float(x) * float(ns) / float(n);
#endif
  int i = e <= 0.f ? 0 : e >= float(ns) ? ns : int(e);
  while (i > 0 && offset(i - 1) >= x) --i;
  while (i < ns && offset(i) < x) ++i;
  return i < ns && offset(i) == x;
}

// A sample hint entry counts when it is a key (0 <= key < num_keys) above every earlier
// counted entry (`running_max`, -1 before the first): ascending hints count whole, and
// no key counts twice whatever the caller passes (duplicates, any order, junk).
WINNOW_HD bool hint_entry_counts(int key, int running_max, int num_keys) {
  return key >= 0 && key < num_keys && key > running_max;
}

}  // namespace winnow
