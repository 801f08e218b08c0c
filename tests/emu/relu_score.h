// The score functor emit_score_functor prints for relu_mh with the key scale, for the
// emulated kernels (tests/test_topk_emulated.cpp and test_paged_stream_emulated.cpp check
// the generated stubs print this one). Include after tests/emu/cuda_emulation.h and
// common/score_ops.cuh.
#pragma once

namespace winnow {

template <int H>
struct EmuReluScore {
  static float reduce0(const ScoreArgs& a) {
    float acc = op_mul(a.w[0], op_relu(a.dot[0]));
    for (int h = 1; h < H; ++h) acc = op_add(acc, op_mul(a.w[h], op_relu(a.dot[h])));
    return acc;
  }
  static float eval(const ScoreArgs& a) { return op_mul(reduce0(a), a.kscale); }
  static constexpr bool kHeadSum = true;
  static float term(float dot, float w, float) { return op_mul(w, op_relu(dot)); }
  static constexpr bool kWeightedTerm = true;
  static constexpr bool kReluOfDot = true;
  static float unweighted(float dot, float) { return op_relu(dot); }
  static float post(float hsum, const ScoreArgs& a) { return op_mul(hsum, a.kscale); }
};

}  // namespace winnow
