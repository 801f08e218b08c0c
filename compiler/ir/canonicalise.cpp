// Canonicalisation: one spelling per meaning, so equal scores share one cache entry, and
// never a change of meaning: every rewrite here gives the same value, to the bit (NaN,
// inf and -0 included), in float as the device computes and in double as ir::eval does.
// Bottom up, each node with canonical children is
//  - folded when all its operands are constants and the result is exact: the float result
//    (eval's semantics, as the device computes it) equals the double one and is finite.
//    So `2 + 3` and `exp(0)` fold; `0.1 * 3`, `1e-30 * 1e-30` (float underflow to 0,
//    which would turn `* inf` from inf into NaN) and `sqrt(-1)` stay for the kernel;
//  - for add/mul/max/min, given its operands in descending printed order: constants (which
//    print starting with a digit or '-') go right, and the head sum leads the per-key
//    factor. IEEE + and * are commutative, and max/min are made so (eval.cpp), so this is
//    exact; reassociation is not, so `(a * b) * c` keeps its grouping.
// A per-key factor is not pulled out of a head sum: sum_h(x * f) and sum_h(x) * f differ
// (f = inf with x of both signs: NaN vs inf; f = 0 with x whose sum overflows: 0 vs NaN;
// x * f overflowing per head; and in rounding), and NaN ranks first, so the selection
// would change. The written form is what the kernel computes.
// Applying it again changes nothing.
#include <cmath>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

// A constant for a fold whose float and double results agree (so the fold is exact in
// both), else null: the node stays for the device to compute.
Expr exact_fold(float in_float, double in_double) {
  if (!std::isfinite(in_float) || static_cast<double>(in_float) != in_double) return nullptr;
  if (in_float == 0.0f && std::signbit(in_float) != std::signbit(in_double)) return nullptr;
  return constant(in_float);
}

bool commutative(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Max || op == BinaryOp::Min;
}

Expr canonical_unary(const Expr& original, UnaryOp op, const Expr& a) {
  if (a->kind == NodeKind::Const) {
    if (Expr folded = exact_fold(apply_unary(op, a->value), apply_unary(op, double(a->value))))
      return folded;
  }
  if (original && original->args[0] == a) return original;  // unchanged: keep the shared node
  return unary(op, a);
}

Expr canonical_binary(const Expr& original, BinaryOp op, Expr a, Expr b) {
  if (a->kind == NodeKind::Const && b->kind == NodeKind::Const) {
    if (Expr folded = exact_fold(apply_binary(op, a->value, b->value),
                                 apply_binary(op, double(a->value), double(b->value))))
      return folded;
  }
  if (commutative(op) && print(a) < print(b)) std::swap(a, b);
  if (original && original->args[0] == a && original->args[1] == b) return original;
  return binary(op, std::move(a), std::move(b));
}

Expr canonical_head_reduce(const Expr& original, ReduceOp op, const Expr& body) {
  if (original && original->args[0] == body) return original;
  return head_reduce(op, body);
}

Expr canonical(const Expr& e) {
  switch (e->kind) {
    case NodeKind::Const:
    case NodeKind::Param:
    case NodeKind::Dot:
      return e;
    case NodeKind::Unary:
      return canonical_unary(e, e->unary, canonical(e->args.at(0)));
    case NodeKind::Binary:
      return canonical_binary(e, e->binary, canonical(e->args.at(0)), canonical(e->args.at(1)));
    case NodeKind::HeadReduce:
      return canonical_head_reduce(e, e->reduce, canonical(e->args.at(0)));
  }
  throw InternalError("canonicalise: unknown node kind");
}

}  // namespace

Expr canonicalise(const Expr& e) {
  if (!e) throw InternalError("canonicalise: null program");
  return canonical(e);
}

}  // namespace winnow::ir
