// Canonicalisation: one spelling per meaning, so equal scores share one cache entry.
// Bottom up, each node with canonical children is
//  - folded when all its operands are constants (in float, with eval's semantics, as the
//    device would compute it; a non-finite result is left unfolded, constants are finite),
//  - for add/mul/max/min, given its operands in descending printed order: constants (which
//    print starting with a digit or '-') go right, and the head sum leads the per-key factor,
//  - for sum_h(mul(x, f)) with f free of h: rewritten to mul(sum_h(x), f), since f is the
//    same for every head (kscale, ksq, ...) and is better applied once.
// Applying it again changes nothing.
#include <cmath>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

bool commutative(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Mul || op == BinaryOp::Max || op == BinaryOp::Min;
}

// True when the value changes with the head bound by the enclosing reduction.
bool reads_bound_head(const Node& n) {
  if ((n.kind == NodeKind::Dot || (n.kind == NodeKind::Param && param_per_head(n.param))) &&
      n.head == kBoundHead)
    return true;
  for (const Expr& a : n.args)
    if (reads_bound_head(*a)) return true;
  return false;
}

Expr canonical_unary(const Expr& original, UnaryOp op, const Expr& a) {
  if (a->kind == NodeKind::Const) {
    const float folded = apply_unary(op, a->value);
    if (std::isfinite(folded)) return constant(folded);
  }
  if (original && original->args[0] == a) return original;  // unchanged: keep the shared node
  return unary(op, a);
}

Expr canonical_binary(const Expr& original, BinaryOp op, Expr a, Expr b) {
  if (a->kind == NodeKind::Const && b->kind == NodeKind::Const) {
    const float folded = apply_binary(op, a->value, b->value);
    if (std::isfinite(folded)) return constant(folded);
  }
  if (commutative(op) && print(a) < print(b)) std::swap(a, b);
  if (original && original->args[0] == a && original->args[1] == b) return original;
  return binary(op, std::move(a), std::move(b));
}

Expr canonical_head_reduce(const Expr& original, ReduceOp op, const Expr& body) {
  // Only a sum distributes over a factor of any sign; max_h(x * f) does not.
  if (op == ReduceOp::Sum && body->kind == NodeKind::Binary && body->binary == BinaryOp::Mul) {
    const Expr& lhs = body->args[0];
    const Expr& rhs = body->args[1];
    const bool lhs_per_head = reads_bound_head(*lhs);
    const bool rhs_per_head = reads_bound_head(*rhs);
    if (lhs_per_head != rhs_per_head) {
      const Expr& per_head = lhs_per_head ? lhs : rhs;
      const Expr& factor = lhs_per_head ? rhs : lhs;
      return canonical_binary(nullptr, BinaryOp::Mul,
                              canonical_head_reduce(nullptr, ReduceOp::Sum, per_head), factor);
    }
  }
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
