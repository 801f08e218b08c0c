// The canonical printer: the serialisation of a program (cache keys and golden tests
// read it), so it must be deterministic and independent of the C library's printf.
#include <bit>
#include <cmath>
#include <string>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

// C99 hex float of the exact value, shortest mantissa: 2 -> 0x1p+1, 1.5 -> 0x1.8p+0,
// -0.0 -> -0x0p+0. Subnormal floats are normal as doubles, so the leading digit is 1.
void append_hex_float(float v, std::string& out) {
  const uint64_t bits = std::bit_cast<uint64_t>(static_cast<double>(v));
  if (bits >> 63) out += '-';
  const int biased_exponent = static_cast<int>((bits >> 52) & 0x7ff);
  uint64_t mantissa = bits & ((uint64_t{1} << 52) - 1);
  if (biased_exponent == 0 && mantissa == 0) {
    out += "0x0p+0";
    return;
  }
  out += "0x1";
  if (mantissa != 0) {
    out += '.';
    int digits = 13;  // 52 bits of mantissa
    while ((mantissa & 0xf) == 0) {
      mantissa >>= 4;
      --digits;
    }
    for (int i = digits - 1; i >= 0; --i) out += "0123456789abcdef"[(mantissa >> (4 * i)) & 0xf];
  }
  const int exponent = biased_exponent - 1023;
  out += 'p';
  out += exponent < 0 ? '-' : '+';
  out += std::to_string(exponent < 0 ? -exponent : exponent);
}

void append_head(int head, std::string& out) {
  if (head == kBoundHead) out += 'h';
  else out += std::to_string(head);
}

void print_node(const Node& n, std::string& out);

void print_Const(const Node& n, std::string& out) { append_hex_float(n.value, out); }

void print_Param(const Node& n, std::string& out) {
  out += param_name(n.param);
  if (!param_per_head(n.param)) return;
  out += '[';
  append_head(n.head, out);
  out += ']';
}

void print_Dot(const Node& n, std::string& out) {
  out += "dot(";
  append_head(n.head, out);
  out += ')';
}

void print_call(const char* name, const Node& n, std::string& out) {
  out += name;
  out += '(';
  for (size_t i = 0; i < n.args.size(); ++i) {
    if (i) out += ", ";
    if (!n.args[i]) throw InternalError(std::string("print: ") + name + " has a null operand");
    print_node(*n.args[i], out);
  }
  out += ')';
}

void print_Unary(const Node& n, std::string& out) { print_call(unary_name(n.unary), n, out); }
void print_Binary(const Node& n, std::string& out) { print_call(binary_name(n.binary), n, out); }
void print_HeadReduce(const Node& n, std::string& out) { print_call(reduce_name(n.reduce), n, out); }

void print_node(const Node& n, std::string& out) {
  switch (n.kind) {
#define WINNOW_NODE(name)      \
  case NodeKind::name:         \
    return print_##name(n, out);
#include "compiler/ir/nodes.def"
#undef WINNOW_NODE
  }
  throw InternalError("print: unknown node kind");
}

}  // namespace

std::string print(const Expr& e) {
  if (!e) throw InternalError("print: null program");
  std::string out;
  print_node(*e, out);
  return out;
}

}  // namespace winnow::ir
