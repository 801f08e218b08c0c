// Which keys make up a row's sample (the first pass that sets the initial gate). The
// sample's k-th best is a safe lower bound of the row's only when its keys are distinct
// and inside the row's window, so both rules live here, for the kernel and the CPU tests.
#pragma once
#include "winnow/portable.cuh"

namespace winnow {

// The i-th of the ns strided sample keys of the window [start, start + n).
WINNOW_HD int strided_sample_key(int i, int start, int n, int ns) {
  return start + int((long long)i * n / ns);
}

// Whether `key` of [start, start + n) is one of the ns strided sample keys: some i in
// [0, ns) has floor(i n / ns) = x, i.e. ceil(x ns / n) < ceil((x + 1) ns / n).
WINNOW_HD bool is_strided_sample_key(int key, int start, int n, int ns) {
  if (ns <= 0 || n <= 0 || key < start || key - start >= n) return false;
  const long long x = key - start;
  return (x * ns + n - 1) / n < ((x + 1) * ns + n - 1) / n;
}

// A sample hint entry counts when it is a key (0 <= key < num_keys) above every earlier
// counted entry (`running_max`, -1 before the first): ascending hints count whole, and
// no key counts twice whatever the caller passes (duplicates, any order, junk).
WINNOW_HD bool hint_entry_counts(int key, int running_max, int num_keys) {
  return key >= 0 && key < num_keys && key > running_max;
}

}  // namespace winnow
