// The built-in score functions, as IR programs in canonical form (so they share cache
// entries with the same score written by a user).
#include "compiler/ir/ir.h"

namespace winnow::ir {

Expr relu_mh(bool key_scale) {
  Expr score = head_reduce(ReduceOp::Sum,
                           binary(BinaryOp::Mul, param(ParamId::W), unary(UnaryOp::Relu, dot())));
  if (key_scale) score = binary(BinaryOp::Mul, score, param(ParamId::KScale));
  return canonicalise(score);
}

Expr ip() { return canonicalise(dot(0)); }

// -||q - k||^2 = -(|q|^2 + |k|^2 - 2 q.k)
Expr l2() {
  const Expr squares = binary(BinaryOp::Add, param(ParamId::QSq, 0), param(ParamId::KSq));
  const Expr twice_dot = binary(BinaryOp::Mul, constant(2.0f), dot(0));
  return canonicalise(unary(UnaryOp::Neg, binary(BinaryOp::Sub, squares, twice_dot)));
}

// q.k / (|q| |k|), with one square root of the product of the squared norms.
Expr cosine() {
  const Expr norms = unary(UnaryOp::Sqrt, binary(BinaryOp::Mul, param(ParamId::QSq, 0),
                                                 param(ParamId::KSq)));
  return canonicalise(binary(BinaryOp::Div, dot(0), norms));
}

}  // namespace winnow::ir
