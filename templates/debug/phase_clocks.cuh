// Cycle counts of the topk kernel's steps, for measuring (WINNOW_PHASE_CLOCKS).
#pragma once

// Measurement switch: -DWINNOW_PHASE_CLOCKS=1 makes CTA 0 print the SM cycles its
// thread 0 spent in each step of the top-k (rows, sample, filter, select, write) at exit.
#ifndef WINNOW_PHASE_CLOCKS
#define WINNOW_PHASE_CLOCKS 0
#endif

namespace winnow {

// The cycle counts of WINNOW_PHASE_CLOCKS: mark(i) adds the time since the last mark to
// step i. Compiled away when off.
struct PhaseClocks {
  long long total[6] = {0, 0, 0, 0, 0, 0};
  long long last = 0;
  __device__ __forceinline__ void mark(int i) {
    if constexpr (WINNOW_PHASE_CLOCKS) {
      const long long now = clock64();
      if (i >= 0) total[i] += now - last;
      last = now;
    }
  }
};

}  // namespace winnow
