// What a program reads: drives code generation (which inputs to load) and input checks.
#include <algorithm>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

void note_head(int head, Uses& u) {
  if (head != kBoundHead) u.max_fixed_head = std::max(u.max_fixed_head, head);
}

void collect(const Node& n, Uses& u) {
  switch (n.kind) {
    case NodeKind::Param:
      switch (n.param) {
        case ParamId::W: u.w = true; break;
        case ParamId::KScale: u.kscale = true; break;
        case ParamId::QSq: u.qsq = true; break;
        case ParamId::KSq: u.ksq = true; break;
      }
      if (param_per_head(n.param)) note_head(n.head, u);
      break;
    case NodeKind::Dot:
      note_head(n.head, u);
      break;
    case NodeKind::HeadReduce:
      u.head_reduce = true;
      break;
    case NodeKind::Const:
    case NodeKind::Unary:
    case NodeKind::Binary:
      break;
  }
  for (const Expr& a : n.args) collect(*a, u);
}

}  // namespace

Uses uses(const Expr& e) {
  if (!e) throw InternalError("uses: null program");
  Uses u;
  collect(*e, u);
  return u;
}

}  // namespace winnow::ir
