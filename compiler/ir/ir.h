// Score-expression IR: immutable, shared nodes. A program is one Expr (its root).
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace winnow::ir {

enum class NodeKind {
#define WINNOW_NODE(name) name,
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
};
const char* node_kind_name(NodeKind k);

enum class UnaryOp { Neg, Relu, Exp, Log, Sqrt, Abs, Softplus, Sigmoid, Tanh };
enum class BinaryOp { Add, Sub, Mul, Div, Max, Min };
enum class ReduceOp { Sum, Max };

const char* unary_name(UnaryOp op);    // "neg", "relu", ...
const char* binary_name(BinaryOp op);  // "add", "sub", ...
const char* reduce_name(ReduceOp op);  // "sum_h", "max_h"

// The named scalars a program may read. Per-row ones may be per head.
enum class ParamId {
  W,       // w[h]: per row and head, fp32 input (WINNOW_INPUT_WEIGHTS)
  KScale,  // kscale: per key, fp32 input (WINNOW_INPUT_KEY_SCALE)
  QSq,     // qsq[h]: |q[h]|^2, computed by the kernel
  KSq,     // ksq: |k|^2, computed by the kernel
};
const char* param_name(ParamId p);  // "w", "kscale", "qsq", "ksq"
bool param_per_head(ParamId p);     // w and qsq are indexed by head

// Head index of a Dot or per-head Param: kBoundHead means the h bound by the enclosing
// HeadReduce; 0..H-1 a fixed head (e.g. dot(0) for single-head scores).
inline constexpr int kBoundHead = -1;

struct Node;
using Expr = std::shared_ptr<const Node>;

struct Node {
  NodeKind kind;
  float value = 0.0f;           // Const
  ParamId param = ParamId::W;   // Param
  int head = kBoundHead;        // Dot, per-head Param
  UnaryOp unary = UnaryOp::Neg; // Unary
  BinaryOp binary = BinaryOp::Add;  // Binary
  ReduceOp reduce = ReduceOp::Sum;  // HeadReduce
  std::vector<Expr> args;       // Unary: 1, Binary: 2, HeadReduce: 1 (the body)
  uint64_t hash = 0;            // structural hash, set by the builder
};

// Builder: the only way to make nodes (so every node carries its hash).
Expr constant(float v);
Expr param(ParamId p, int head = kBoundHead);
Expr dot(int head = kBoundHead);
Expr unary(UnaryOp op, Expr a);
Expr binary(BinaryOp op, Expr a, Expr b);
Expr head_reduce(ReduceOp op, Expr body);

// Structural equality (same kinds, fields and children).
bool equal(const Expr& a, const Expr& b);

// The canonical printer is the serialisation: `sum_h(mul(w[h], relu(dot(h))))`.
// Constants print as C99 hex floats. Deterministic.
std::string print(const Expr& e);

// A mistake in the user's text or program: carries the 0-based position in the text
// (or -1 when the program did not come from text).
class UserError : public std::runtime_error {
 public:
  UserError(const std::string& msg, int position = -1)
      : std::runtime_error(msg), position_(position) {}
  int position() const { return position_; }
 private:
  int position_;
};
// A broken invariant inside winnow (a bug, not the user's fault).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Bounds on a program, so that a caller's text cannot cost without bound in the parser, the
// passes, the generated source or NVRTC (include/winnow.h: WINNOW_MAX_EXPRESSION_BYTES and
// WINNOW_MAX_EXPRESSION_NODES). Nodes are counted as the printer writes them (a shared
// sub-expression counts at every use). Real scores take a dozen; NVRTC's cost grows with
// the nodes inside a head sum (each is unrolled over heads and accumulators): a sum of
// dozens of dot and w nodes at 64 heads already takes several times relu_mh's compile time,
// and hundreds of nodes take minutes and gigabytes.
inline constexpr size_t kMaxTextBytes = 4096;
inline constexpr int kMaxNodes = 64;

// At most 64 characters of `text` around `position` (-1: its start), "..." where cut,
// control characters shown as '?', and when position >= 0 a second line with a caret
// under it: error messages quote this, never a whole (possibly huge) text.
std::string text_excerpt(std::string_view text, int position = -1);

// Parses both the canonical form and the infix form a person writes:
//   sum_h(w[h] * relu(dot(h))) * kscale      max_h(dot(h))      -(qsq[0] + ksq - 2 * dot(0))
// Infix operators + - * / and unary -, function calls relu(x), max(a, b), etc.
// Bare `dot` means dot(0) outside a reduction and dot(h) inside one; likewise `w`, `qsq`.
// Throws UserError with the position of the problem, also for text longer than
// kMaxTextBytes or a program of more than kMaxNodes nodes.
Expr parse(std::string_view text);

// Checks a program: throws UserError for mistakes a user can make (h used outside a
// head reduction, nested head reductions, a fixed head >= heads, a program with no
// dot, more than kMaxNodes nodes), InternalError for malformed nodes. `heads` is the
// problem's H. `source`: the text the program was parsed from, if any; messages about the
// whole program quote (an excerpt of) it rather than the printed IR.
void verify(const Expr& e, int heads, std::string_view source = {});

// What a program reads; drives codegen and input validation.
struct Uses {
  bool w = false, kscale = false, qsq = false, ksq = false;
  int max_fixed_head = -1;  // largest fixed head index used, -1 if none
  bool head_reduce = false;
};
Uses uses(const Expr& e);

// Canonicalisation pass: folds constant subtrees where the fold is exact, and orders the
// operands of add/mul/max/min by their printed form. Keeps the value to the bit (NaN, inf
// and -0 included; see canonicalise.cpp): so it does not move a per-key factor out of a
// head sum, which is not exact. Idempotent.
Expr canonicalise(const Expr& e);

// Built-in score functions, as IR programs.
Expr relu_mh(bool key_scale);  // sum_h(w[h] * relu(dot(h))) [* kscale]
Expr ip();                     // dot(0)
Expr l2();                     // -(qsq[0] + ksq - 2 * dot(0))
Expr cosine();                 // dot(0) / sqrt(qsq[0] * ksq)

// CPU evaluation in double, for the reference: the same semantics as the device code
// (relu and max propagate NaN, as torch does).
struct EvalInputs {
  const double* dot;  // [H] q[h] . k
  const double* w;    // [H] or null
  double kscale = 1.0;
  const double* qsq;  // [H] or null
  double ksq = 0.0;
  int heads = 1;
};
double eval(const Expr& e, const EvalInputs& in);

// The scalar meaning of one operator (defined with eval, in eval.cpp): eval uses the
// double versions, constant folding the float ones, so both follow the device's rules.
double apply_unary(UnaryOp op, double x);
float apply_unary(UnaryOp op, float x);
double apply_binary(BinaryOp op, double a, double b);
float apply_binary(BinaryOp op, float a, float b);

}  // namespace winnow::ir
