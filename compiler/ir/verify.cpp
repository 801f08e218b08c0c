// The verifier: user mistakes (UserError, quoting the offending sub-expression) and
// malformed nodes (InternalError: a bug in whoever built them, not the user's fault).
#include <bit>
#include <cmath>
#include <string>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

struct VerifyContext {
  int heads = 1;
  const Node* open_reduction = nullptr;  // the enclosing HeadReduce, if any
  bool reads_dot = false;
};

std::string quoted(const Node& n) {
  // print() needs an Expr; wrap the node without owning it.
  return "'" + print(Expr(Expr(), &n)) + "'";
}

void require_arity(const Node& n, size_t arity) {
  if (n.args.size() != arity)
    throw InternalError(std::string(node_kind_name(n.kind)) + " node has " +
                        std::to_string(n.args.size()) + " operands, expected " +
                        std::to_string(arity));
  for (const Expr& a : n.args)
    if (!a) throw InternalError(std::string(node_kind_name(n.kind)) + " node has a null operand");
}

void require_in_range(int value, int count, const char* what) {
  if (value < 0 || value >= count)
    throw InternalError(std::string("bad ") + what + " " + std::to_string(value));
}

// A head index is either h (then there must be a reduction binding it) or a fixed head.
void check_head(const Node& n, const VerifyContext& cx) {
  if (n.head == kBoundHead) {
    if (!cx.open_reduction)
      throw UserError("head 'h' used outside sum_h/max_h in " + quoted(n));
    return;
  }
  if (n.head < 0) throw InternalError("negative head index " + std::to_string(n.head));
  if (n.head >= cx.heads)
    throw UserError("head index " + std::to_string(n.head) + " in " + quoted(n) +
                    " is out of range for " + std::to_string(cx.heads) + " heads");
}

void verify_node(const Node& n, VerifyContext& cx);

void verify_Const(const Node& n, VerifyContext&) {
  require_arity(n, 0);
  if (!std::isfinite(n.value)) throw InternalError("non-finite constant");
}

void verify_Param(const Node& n, VerifyContext& cx) {
  require_arity(n, 0);
  require_in_range(static_cast<int>(n.param), 4, "ParamId");
  if (param_per_head(n.param)) check_head(n, cx);
  else if (n.head != kBoundHead)
    throw InternalError(std::string("per-key param '") + param_name(n.param) + "' has a head index");
}

void verify_Dot(const Node& n, VerifyContext& cx) {
  require_arity(n, 0);
  check_head(n, cx);
  cx.reads_dot = true;
}

void verify_Unary(const Node& n, VerifyContext& cx) {
  require_arity(n, 1);
  require_in_range(static_cast<int>(n.unary), static_cast<int>(UnaryOp::Tanh) + 1, "UnaryOp");
  verify_node(*n.args[0], cx);
}

void verify_Binary(const Node& n, VerifyContext& cx) {
  require_arity(n, 2);
  require_in_range(static_cast<int>(n.binary), static_cast<int>(BinaryOp::Min) + 1, "BinaryOp");
  verify_node(*n.args[0], cx);
  verify_node(*n.args[1], cx);
}

void verify_HeadReduce(const Node& n, VerifyContext& cx) {
  require_arity(n, 1);
  require_in_range(static_cast<int>(n.reduce), static_cast<int>(ReduceOp::Max) + 1, "ReduceOp");
  if (cx.open_reduction)
    throw UserError("nested head reduction " + quoted(n) + " inside " + quoted(*cx.open_reduction));
  cx.open_reduction = &n;
  verify_node(*n.args[0], cx);
  cx.open_reduction = nullptr;
}

void verify_node(const Node& n, VerifyContext& cx) {
  switch (n.kind) {
#define WINNOW_NODE(name)          \
  case NodeKind::name:             \
    return verify_##name(n, cx);
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  throw InternalError("unknown node kind " + std::to_string(static_cast<int>(n.kind)));
}

}  // namespace

void verify(const Expr& e, int heads) {
  if (!e) throw InternalError("verify: null program");
  if (heads < 1) throw UserError("heads must be at least 1, found " + std::to_string(heads));
  VerifyContext cx;
  cx.heads = heads;
  verify_node(*e, cx);
  if (!cx.reads_dot)
    throw UserError("program " + quoted(*e) + " reads no dot product (use dot or dot(h))");
}

}  // namespace winnow::ir
