// The one order every result follows (docs/semantics.md, Order): scores descending, NaN
// above every number, equal scores by the smaller key index; -0 equals +0.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// A score as an unsigned key whose integer order is the rank order: larger is better.
WINNOW_HD u32 order_key(float s) {
  if (s != s) return 0xFFFFFFFFu;  // every NaN ranks first, all NaNs equal
  u32 b = float_bits(s);
  if (b == 0x80000000u) b = 0;     // -0 ranks as +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The score an order key stands for (NaN comes back as the canonical quiet NaN).
WINNOW_HD float order_key_score(u32 k) {
  if (k == 0xFFFFFFFFu) return bits_float(0x7FC00000u);
  return bits_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// A RankKey is unique per key: order key above, inverted index below, so that a larger
// RankKey always ranks first and ties go to the smaller index.
WINNOW_HD u64 rank_key(u32 okey, int index) {
  return (u64(okey) << 32) | u64(~u32(index));
}
WINNOW_HD int rank_key_index(u64 rk) { return int(~u32(rk & 0xFFFFFFFFull)); }
WINNOW_HD u32 rank_key_order(u64 rk) { return u32(rk >> 32); }
// The score an output slot reports: its RankKey's score, or -inf padding; negated where
// the plan reports distances (WINNOW_OUTPUT_DISTANCE: l2's ||q - k||^2, padding +inf).
// NaN stays the canonical quiet NaN either way.
WINNOW_HD float output_score(u64 rk, bool real, int negate) {
  const float s = real ? order_key_score(rank_key_order(rk)) : -bits_float(0x7F800000u);
  return negate && s == s ? -s : s;
}

// ThresholdBins: order keys mapped to bins by one subtract and one shift, monotone, so
// that a bin holding the k-th best bounds every key below it. Bin 0 holds everything
// below `lo` (known to be outside the top k); bins above are linear in the order key.
struct ThresholdBins {
  u32 lo;
  u32 shift;
  int count;  // number of bins
  WINNOW_HD int bin(u32 okey) const {
    if (okey < lo) return 0;
    u32 b = 1u + ((okey - lo) >> shift);
    return b >= u32(count) ? count - 1 : int(b);
  }
};

// The lowest score that can fall in bin `gate` or above: a float e such that every score
// s with bins.bin(order_key(s)) >= gate has !(s < e) (NaN compares false, so it passes).
// A superset test: what passes still goes through bin(). gate 0: -inf (everything).
WINNOW_HD float gate_edge_score(const ThresholdBins& bins, int gate) {
  if (gate <= 0) return bits_float(0xFF800000u);
  const unsigned long long edge =
      (unsigned long long)bins.lo + ((unsigned long long)(gate - 1) << bins.shift);
  if (edge > 0xFF800000ull) return bits_float(0x7F800000u);  // only +inf and NaN above
  return order_key_score(u32(edge));
}

// Bins spanning [lo, hi]; keys above hi share the last bin.
WINNOW_HD ThresholdBins make_threshold_bins(u32 lo, u32 hi, int count) {
  ThresholdBins t;
  t.lo = lo;
  t.count = count;
  u32 span = hi > lo ? hi - lo : 0u;
  // At most 31: a u32 shifted by 32 is undefined in C++ (x86 shifts by 0, PTX's shr gives
  // 0), and 31 still maps any span onto two linear bins (count = 3, the fewest).
  u32 s = 0;
  while (s < 31u && (span >> s) > u32(count - 3)) ++s;
  t.shift = s;
  return t;
}

}  // namespace winnow
