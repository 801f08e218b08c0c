// IEEE 754-2019 maximum and minimum on floats, the `max`/`min` of the score IR: NaN if
// either operand is NaN, and -0 < +0, so both are commutative to the bit. Written once for
// the device (score_ops.cuh) and the host tests; compiler/ir/eval.cpp is the reference.
#pragma once
#include "common/portable.cuh"

namespace winnow {

WINNOW_HD float ieee_maximum(float a, float b) {
  if (a != a || b != b) return bits_float(0x7FC00000u);
  if (a == b) return (float_bits(a) & 0x80000000u) ? b : a;  // +0 over -0
  return a > b ? a : b;
}

WINNOW_HD float ieee_minimum(float a, float b) {
  if (a != a || b != b) return bits_float(0x7FC00000u);
  if (a == b) return (float_bits(a) & 0x80000000u) ? a : b;  // -0 under +0
  return a < b ? a : b;
}

}  // namespace winnow
