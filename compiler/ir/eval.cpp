// CPU evaluation, the reference the device code is checked against. The device mirrors
// these semantics exactly; any change here is a change to what every kernel computes:
//   relu(x)     = (x < 0) ? 0 : x            NaN propagates (as torch.relu); relu(-0) = -0
//   max/min     = IEEE 754-2019 maximum/minimum: NaN if either operand is NaN, and
//                 -0 < +0, so both are commutative to the bit (canonicalise reorders them)
//   max_h       = max over heads with the same rule, heads 0..H-1 in order
//   sum_h       = ((body(0) + body(1)) + ...) + body(H-1), heads in order
//   softplus(x) = x > 20 ? x : log1p(exp(x))
//   sigmoid(x)  = 1 / (1 + exp(-x))
//   neg, exp, log, sqrt, abs, tanh as the C library; + - * / as IEEE.
#include <cmath>
#include <limits>
#include <string>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

template <typename T>
T unary_semantics(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Relu: return x < T(0) ? T(0) : x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Softplus: return x > T(20) ? x : std::log1p(std::exp(x));
    case UnaryOp::Sigmoid: return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::Tanh: return std::tanh(x);
  }
  throw InternalError("unknown unary operator");
}

template <typename T>
T maximum(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;  // only differs for -0 vs +0: +0 wins
  return a > b ? a : b;
}

template <typename T>
T minimum(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;  // -0 wins
  return a < b ? a : b;
}

template <typename T>
T binary_semantics(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Max: return maximum(a, b);
    case BinaryOp::Min: return minimum(a, b);
  }
  throw InternalError("unknown binary operator");
}

class Evaluator {
 public:
  explicit Evaluator(const EvalInputs& in) : in_(in) {}

  double value(const Node& n) {
    switch (n.kind) {
#define WINNOW_NODE(name)   \
  case NodeKind::name:      \
    return value_##name(n);
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
    }
    throw InternalError("eval: unknown node kind");
  }

 private:
  // The head a Dot or per-head Param reads: h of the open reduction, or a fixed one.
  int head_of(const Node& n) const {
    const int head = n.head == kBoundHead ? bound_head_ : n.head;
    if (head < 0) throw UserError("eval: head 'h' used outside sum_h/max_h");
    if (head >= in_.heads)
      throw UserError("eval: head " + std::to_string(head) + " out of range for " +
                      std::to_string(in_.heads) + " heads");
    return head;
  }

  static double read(const double* values, int head, const char* name) {
    if (!values) throw UserError(std::string("eval: the program reads ") + name + " but none was given");
    return values[head];
  }

  double value_Const(const Node& n) { return n.value; }

  double value_Param(const Node& n) {
    switch (n.param) {
      case ParamId::W: return read(in_.w, head_of(n), "w");
      case ParamId::KScale: return in_.kscale;
      case ParamId::QSq: return read(in_.qsq, head_of(n), "qsq");
      case ParamId::KSq: return in_.ksq;
    }
    throw InternalError("eval: unknown param");
  }

  double value_Dot(const Node& n) { return read(in_.dot, head_of(n), "dot"); }

  double value_Unary(const Node& n) { return apply_unary(n.unary, value(*n.args.at(0))); }

  double value_Binary(const Node& n) {
    const double a = value(*n.args.at(0));
    return apply_binary(n.binary, a, value(*n.args.at(1)));
  }

  double value_HeadReduce(const Node& n) {
    if (bound_head_ != kBoundHead) throw UserError("eval: nested head reduction");
    if (in_.heads < 1) throw UserError("eval: heads must be at least 1");
    const BinaryOp combine = n.reduce == ReduceOp::Sum ? BinaryOp::Add : BinaryOp::Max;
    bound_head_ = 0;
    double acc = value(*n.args.at(0));
    for (bound_head_ = 1; bound_head_ < in_.heads; ++bound_head_)
      acc = apply_binary(combine, acc, value(*n.args.at(0)));
    bound_head_ = kBoundHead;
    return acc;
  }

  const EvalInputs& in_;
  int bound_head_ = kBoundHead;
};

}  // namespace

double apply_unary(UnaryOp op, double x) { return unary_semantics(op, x); }
float apply_unary(UnaryOp op, float x) { return unary_semantics(op, x); }
double apply_binary(BinaryOp op, double a, double b) { return binary_semantics(op, a, b); }
float apply_binary(BinaryOp op, float a, float b) { return binary_semantics(op, a, b); }

double eval(const Expr& e, const EvalInputs& in) {
  if (!e) throw InternalError("eval: null program");
  return Evaluator(in).value(*e);
}

}  // namespace winnow::ir
