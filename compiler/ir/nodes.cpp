// Builder, structural hash, structural equality and the names of kinds and operators.
#include <bit>
#include <cmath>
#include <string>

#include "compiler/ir/ir.h"

namespace winnow::ir {

const char* node_kind_name(NodeKind k) {
  switch (k) {
#define WINNOW_NODE(name) \
  case NodeKind::name:    \
    return #name;
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  return "?";
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Softplus: return "softplus";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
  }
  return "?";
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Max: return "max";
    case BinaryOp::Min: return "min";
  }
  return "?";
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum_h";
    case ReduceOp::Max: return "max_h";
  }
  return "?";
}

const char* param_name(ParamId p) {
  switch (p) {
    case ParamId::W: return "w";
    case ParamId::KScale: return "kscale";
    case ParamId::QSq: return "qsq";
    case ParamId::KSq: return "ksq";
  }
  return "?";
}

bool param_per_head(ParamId p) { return p == ParamId::W || p == ParamId::QSq; }

namespace {

// FNV-1a 64 fed with explicit little-endian bytes: the same hash on every platform and
// run, so it can go into on-disk cache keys and golden tests.
class StructuralHash {
 public:
  void add(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      state_ ^= (v >> (8 * i)) & 0xffu;
      state_ *= 0x100000001b3ull;
    }
  }
  void add_int(int v) { add(static_cast<uint32_t>(v), 4); }
  void add_enum(auto e) { add(static_cast<uint64_t>(e), 1); }
  uint64_t value() const { return state_; }

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;
};

// The fields that distinguish nodes of one kind; the hash and equality both read these.
void hash_fields_Const(const Node& n, StructuralHash& h) { h.add(std::bit_cast<uint32_t>(n.value), 4); }
void hash_fields_Param(const Node& n, StructuralHash& h) { h.add_enum(n.param); h.add_int(n.head); }
void hash_fields_Dot(const Node& n, StructuralHash& h) { h.add_int(n.head); }
void hash_fields_Unary(const Node& n, StructuralHash& h) { h.add_enum(n.unary); }
void hash_fields_Binary(const Node& n, StructuralHash& h) { h.add_enum(n.binary); }
void hash_fields_HeadReduce(const Node& n, StructuralHash& h) { h.add_enum(n.reduce); }

bool same_fields_Const(const Node& a, const Node& b) {
  return std::bit_cast<uint32_t>(a.value) == std::bit_cast<uint32_t>(b.value);  // -0 != +0
}
bool same_fields_Param(const Node& a, const Node& b) { return a.param == b.param && a.head == b.head; }
bool same_fields_Dot(const Node& a, const Node& b) { return a.head == b.head; }
bool same_fields_Unary(const Node& a, const Node& b) { return a.unary == b.unary; }
bool same_fields_Binary(const Node& a, const Node& b) { return a.binary == b.binary; }
bool same_fields_HeadReduce(const Node& a, const Node& b) { return a.reduce == b.reduce; }

uint64_t structural_hash(const Node& n) {
  StructuralHash h;
  h.add_enum(n.kind);
  switch (n.kind) {
#define WINNOW_NODE(name)       \
  case NodeKind::name:          \
    hash_fields_##name(n, h);   \
    break;
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  for (const Expr& a : n.args) h.add(a->hash, 8);
  return h.value();
}

bool same_fields(const Node& a, const Node& b) {
  switch (a.kind) {
#define WINNOW_NODE(name) \
  case NodeKind::name:    \
    return same_fields_##name(a, b);
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  throw InternalError("same_fields: unknown node kind");
}

Node node_of(NodeKind kind) {
  Node n;
  n.kind = kind;
  return n;
}

Expr finish(Node n) {
  n.hash = structural_hash(n);
  return std::make_shared<const Node>(std::move(n));
}

void require_child(const Expr& e, const char* what) {
  if (!e) throw InternalError(std::string(what) + ": null operand");
}

void check_head(int head, const char* what) {
  if (head < kBoundHead)
    throw UserError(std::string("head index ") + std::to_string(head) + " of " + what +
                    " is negative");
}

}  // namespace

Expr constant(float v) {
  if (!std::isfinite(v))
    throw UserError("constants must be finite, found " + std::string(std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
  Node n = node_of(NodeKind::Const);
  n.value = v;
  return finish(std::move(n));
}

Expr param(ParamId p, int head) {
  if (!param_per_head(p) && head != kBoundHead)
    throw UserError(std::string("'") + param_name(p) + "' is per key and takes no head index");
  check_head(head, param_name(p));
  Node n = node_of(NodeKind::Param);
  n.param = p;
  n.head = head;
  return finish(std::move(n));
}

Expr dot(int head) {
  check_head(head, "dot");
  Node n = node_of(NodeKind::Dot);
  n.head = head;
  return finish(std::move(n));
}

Expr unary(UnaryOp op, Expr a) {
  require_child(a, unary_name(op));
  Node n = node_of(NodeKind::Unary);
  n.unary = op;
  n.args = {std::move(a)};
  return finish(std::move(n));
}

Expr binary(BinaryOp op, Expr a, Expr b) {
  require_child(a, binary_name(op));
  require_child(b, binary_name(op));
  Node n = node_of(NodeKind::Binary);
  n.binary = op;
  n.args = {std::move(a), std::move(b)};
  return finish(std::move(n));
}

Expr head_reduce(ReduceOp op, Expr body) {
  require_child(body, reduce_name(op));
  Node n = node_of(NodeKind::HeadReduce);
  n.reduce = op;
  n.args = {std::move(body)};
  return finish(std::move(n));
}

bool equal(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (a->hash != b->hash || a->kind != b->kind || a->args.size() != b->args.size()) return false;
  if (!same_fields(*a, *b)) return false;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!equal(a->args[i], b->args[i])) return false;
  return true;
}

}  // namespace winnow::ir
