// The verifier: user mistakes (UserError, quoting the offending sub-expression) and
// malformed nodes (InternalError: a bug in whoever built them, not the user's fault).
#include <cmath>
#include <string>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

struct VerifyContext {
  int heads = 1;
  Expr open_reduction;  // the enclosing HeadReduce, if any
  bool reads_dot = false;
  int nodes = 0;        // visited so far, a shared sub-expression at every use
};

// A sub-expression as quoted in a message: at most 64 characters of its printed form.
std::string quoted(const Expr& e) {
  constexpr size_t kShown = 64;
  const std::string text = print(e);
  std::string out = "'";
  out.append(text, 0, kShown);
  return out.append(text.size() <= kShown ? "'" : "...'");
}

// Checked before anything else reads the node (print included), so a malformed node is
// reported as such rather than crashing the message that would describe it.
void require_arity(const Expr& e, size_t arity) {
  const std::string kind = node_kind_name(e->kind);
  if (e->args.size() != arity)
    throw InternalError(kind + " node has " + std::to_string(e->args.size()) +
                        " operands, expected " + std::to_string(arity));
  for (const Expr& a : e->args)
    if (!a) throw InternalError(kind + " node has a null operand");
}

void require_in_range(int value, int count, const char* what) {
  if (value < 0 || value >= count)
    throw InternalError(std::string("bad ") + what + " " + std::to_string(value));
}

// A head index is either h (then a reduction must bind it) or a fixed head below H.
void check_head(const Expr& e, const VerifyContext& cx) {
  if (e->head == kBoundHead) {
    if (!cx.open_reduction) throw UserError("head 'h' used outside sum_h/max_h in " + quoted(e));
    return;
  }
  if (e->head < 0) throw InternalError("negative head index " + std::to_string(e->head));
  if (e->head >= cx.heads)
    throw UserError("head index " + std::to_string(e->head) + " in " + quoted(e) +
                    " is out of range for " + std::to_string(cx.heads) + " heads");
}

void verify_node(const Expr& e, VerifyContext& cx);

void verify_Const(const Expr& e, VerifyContext&) {
  require_arity(e, 0);
  if (!std::isfinite(e->value)) throw InternalError("non-finite constant");
}

void verify_Param(const Expr& e, VerifyContext& cx) {
  require_arity(e, 0);
  require_in_range(static_cast<int>(e->param), static_cast<int>(ParamId::KSq) + 1, "ParamId");
  if (param_per_head(e->param)) {
    check_head(e, cx);
  } else if (e->head != kBoundHead) {
    throw InternalError(std::string("per-key param '") + param_name(e->param) + "' has a head index");
  }
}

void verify_Dot(const Expr& e, VerifyContext& cx) {
  require_arity(e, 0);
  check_head(e, cx);
  cx.reads_dot = true;
}

void verify_Unary(const Expr& e, VerifyContext& cx) {
  require_arity(e, 1);
  require_in_range(static_cast<int>(e->unary), static_cast<int>(UnaryOp::Tanh) + 1, "UnaryOp");
  verify_node(e->args[0], cx);
}

void verify_Binary(const Expr& e, VerifyContext& cx) {
  require_arity(e, 2);
  require_in_range(static_cast<int>(e->binary), static_cast<int>(BinaryOp::Min) + 1, "BinaryOp");
  verify_node(e->args[0], cx);
  verify_node(e->args[1], cx);
}

void verify_HeadReduce(const Expr& e, VerifyContext& cx) {
  require_arity(e, 1);
  require_in_range(static_cast<int>(e->reduce), static_cast<int>(ReduceOp::Max) + 1, "ReduceOp");
  if (cx.open_reduction)
    throw UserError("nested head reduction " + quoted(e) + " inside " + quoted(cx.open_reduction));
  cx.open_reduction = e;
  verify_node(e->args[0], cx);
  cx.open_reduction = nullptr;
}

void verify_node(const Expr& e, VerifyContext& cx) {
  // Before anything recurses further: a program built around the parser (shared nodes) can
  // expand to far more than it holds.
  if (++cx.nodes > kMaxNodes)
    throw UserError("program has more than " + std::to_string(kMaxNodes) + " nodes");
  switch (e->kind) {
#define WINNOW_NODE(name) \
  case NodeKind::name:    \
    return verify_##name(e, cx);
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  throw InternalError("unknown node kind " + std::to_string(static_cast<int>(e->kind)));
}

}  // namespace

void verify(const Expr& e, int heads, std::string_view source) {
  if (!e) throw InternalError("verify: null program");
  if (heads < 1) throw UserError("heads must be at least 1, found " + std::to_string(heads));
  VerifyContext cx;
  cx.heads = heads;
  verify_node(e, cx);
  if (!cx.reads_dot) {
    // The caller's own text when there is one: '1', not the canonical '0x1p+0'.
    std::string program = quoted(e);
    if (!source.empty()) program = "'" + text_excerpt(source) += "'";
    throw UserError("program " + program + " reads no dot product (use dot or dot(h))");
  }
}

}  // namespace winnow::ir
