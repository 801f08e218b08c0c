// The scalar operations a generated score functor calls. Each is rounded exactly once
// (__fadd_rn and friends: never contracted into an FMA), so the fused and the
// materialize kernels give the same bits. relu and max propagate NaN, as torch does;
// compiler/ir/eval.cpp mirrors these in double for the CPU reference.
#pragma once
#include "common/float_minmax.cuh"
#include "common/portable.cuh"

namespace winnow {

// What a score functor reads for one (row, key) pair.
struct ScoreArgs {
  const float* dot;  // [H]: q[h] . k
  const float* w;    // [H]: the row's weights
  float kscale;      // the key's scale
  const float* qsq;  // [H]: |q[h]|^2
  float ksq;         // |k|^2
};

__device__ __forceinline__ float op_neg(float x) { return -x; }
__device__ __forceinline__ float op_relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float op_exp(float x) { return expf(x); }
__device__ __forceinline__ float op_log(float x) { return logf(x); }
__device__ __forceinline__ float op_sqrt(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ float op_abs(float x) { return fabsf(x); }
__device__ __forceinline__ float op_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float op_sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}
__device__ __forceinline__ float op_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float op_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float op_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float op_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float op_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float op_max(float a, float b) { return ieee_maximum(a, b); }
__device__ __forceinline__ float op_min(float a, float b) { return ieee_minimum(a, b); }

}  // namespace winnow
