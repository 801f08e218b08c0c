// Parser for the text form of a score program: the canonical form the printer writes
// (`mul(sum_h(mul(w[h], relu(dot(h)))), kscale)`) and the infix form a person writes
// (`sum_h(w[h] * relu(dot(h))) * kscale`). Purely syntactic: meaning (h outside a head
// reduction, heads out of range) is verify()'s job, so parse(print(e)) == e for every e
// within the limits (kMaxTextBytes, kMaxNodes, kMaxNesting), which are checked here.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/ir/ir.h"

namespace winnow::ir {
namespace {

enum class TokenKind { Number, Name, Symbol, End };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string_view text;
  int position = 0;
};

// Deep enough for any real score, shallow enough that hostile text cannot overflow the
// stack, here or in the passes that recurse over the program.
constexpr int kMaxNesting = 256;

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// A token as quoted in a message: at most 32 characters of it.
std::string quote(std::string_view s) {
  constexpr size_t kShown = 32;
  std::string out = "'";
  out.append(s.substr(0, kShown));
  if (s.size() <= kShown) return out += "'";
  return out.append("...' (").append(std::to_string(s.size())).append(" characters)");
}

std::string describe(const Token& t) {
  return t.kind == TokenKind::End ? std::string("end of input") : quote(t.text);
}

[[noreturn]] void fail(const std::string& what, int position) {
  throw UserError(what + " at " + std::to_string(position), position);
}

// "expected ')' at 14, found ','": what was wanted and what stood there instead.
[[noreturn]] void fail_expected(const std::string& wanted, const Token& found) {
  throw UserError("expected " + wanted + " at " + std::to_string(found.position) + ", found " +
                      describe(found),
                  found.position);
}

std::optional<UnaryOp> unary_named(std::string_view name) {
  for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Relu, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Sqrt,
                     UnaryOp::Abs, UnaryOp::Softplus, UnaryOp::Sigmoid, UnaryOp::Tanh})
    if (name == unary_name(op)) return op;
  return std::nullopt;
}

std::optional<BinaryOp> binary_named(std::string_view name) {
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max,
                      BinaryOp::Min})
    if (name == binary_name(op)) return op;
  return std::nullopt;
}

std::optional<ReduceOp> reduce_named(std::string_view name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
    if (name == reduce_name(op)) return op;
  return std::nullopt;
}

std::optional<ParamId> param_named(std::string_view name) {
  for (ParamId p : {ParamId::W, ParamId::KScale, ParamId::QSq, ParamId::KSq})
    if (name == param_name(p)) return p;
  return std::nullopt;
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  Token next() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    const size_t start = pos_;
    if (pos_ >= text_.size()) return {TokenKind::End, {}, static_cast<int>(start)};
    const char c = text_[pos_];
    if (is_digit(c) || (c == '.' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1])))
      return number(start);
    if (is_name_start(c)) {
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
      return {TokenKind::Name, text_.substr(start, pos_ - start), static_cast<int>(start)};
    }
    if (std::string_view("()[],+-*/").find(c) != std::string_view::npos) {
      ++pos_;
      return {TokenKind::Symbol, text_.substr(start, 1), static_cast<int>(start)};
    }
    std::string shown(1, c);
    if (!std::isprint(static_cast<unsigned char>(c))) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      shown = hex;
    }
    fail("unexpected character " + quote(shown), static_cast<int>(start));
  }

 private:
  // Decimal (2, 2.5, .5, 1e-3) or C99 hex (0x1.8p+0) literal; checked, not converted, here.
  Token number(size_t start) {
    auto skip = [&](bool (*accept)(char)) {
      size_t n = 0;
      while (pos_ < text_.size() && accept(text_[pos_])) ++pos_, ++n;
      return n;
    };
    auto at = [&](std::string_view chars) {
      return pos_ < text_.size() && chars.find(text_[pos_]) != std::string_view::npos;
    };
    bool well_formed = true;
    const bool hex = text_[pos_] == '0' && pos_ + 1 < text_.size() &&
                     (text_[pos_ + 1] == 'x' || text_[pos_ + 1] == 'X');
    if (hex) {
      pos_ += 2;
      size_t digits = skip(is_hex_digit);
      if (at(".")) ++pos_, digits += skip(is_hex_digit);
      well_formed = digits > 0;
      if (at("pP")) {
        ++pos_;
        if (at("+-")) ++pos_;
        well_formed = well_formed && skip(is_digit) > 0;
      }
    } else {
      skip(is_digit);
      if (at(".")) ++pos_, skip(is_digit);
      if (at("eE")) {
        ++pos_;
        if (at("+-")) ++pos_;
        well_formed = skip(is_digit) > 0;
      }
    }
    if (at(".") || (pos_ < text_.size() && is_name_char(text_[pos_]))) {  // 2.5.1, 2dot, 0x1p1f
      well_formed = false;
      while (pos_ < text_.size() && (is_name_char(text_[pos_]) || text_[pos_] == '.')) ++pos_;
    }
    const std::string_view text = text_.substr(start, pos_ - start);
    if (!well_formed) fail("malformed number " + quote(text), static_cast<int>(start));
    return {TokenKind::Number, text, static_cast<int>(start)};
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Exact conversion to the nearest float (no detour through double, so no double rounding).
float number_value(const Token& t) {
  const bool hex = t.text.size() > 1 && (t.text[1] == 'x' || t.text[1] == 'X');
  const char* first = t.text.data() + (hex ? 2 : 0);
  const char* last = t.text.data() + t.text.size();
  float value = 0.0f;
  const auto [end, ec] = std::from_chars(first, last, value,
                                         hex ? std::chars_format::hex : std::chars_format::general);
  if (ec == std::errc::result_out_of_range)
    fail("constant " + quote(t.text) + " is out of float range", t.position);
  if (ec != std::errc() || end != last) fail("malformed number " + quote(t.text), t.position);
  return value;
}

// A parsed sub-expression and the depth of its tree, bounded so that later passes, which
// recurse over the tree, cannot overflow the stack on text like `dot + dot + ... + dot`.
struct Parsed {
  Expr expr;
  int depth = 1;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : lexer_(text) {
    if (text.size() > kMaxTextBytes)
      throw UserError("expression is " + std::to_string(text.size()) +
                      " bytes long, more than the maximum " + std::to_string(kMaxTextBytes));
    advance();
  }

  Expr program() {
    Parsed e = expression();
    if (current_.kind != TokenKind::End) fail_expected("end of input", current_);
    return e.expr;
  }

 private:
  void advance() { current_ = lexer_.next(); }

  // Every node the parser makes passes here, so the count is checked as the text is read.
  Expr made(Expr e, int position) {
    if (++nodes_ > kMaxNodes)
      fail("expression has more than " + std::to_string(kMaxNodes) + " nodes", position);
    return e;
  }

  bool at_symbol(char c) const {
    return current_.kind == TokenKind::Symbol && current_.text[0] == c;
  }

  void expect(char c) {
    if (!at_symbol(c)) fail_expected("'" + std::string(1, c) + "'", current_);
    advance();
  }

  // Guards every recursion of the parser itself (parentheses add none to the tree's depth).
  struct Nesting {
    explicit Nesting(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting)
        fail("expression nested too deeply", parser.current_.position);
    }
    ~Nesting() { --parser.nesting_; }
    Parser& parser;
  };

  // A node over operands `deepest` deep, made by the token at `position`.
  static Parsed over(Expr e, int deepest, int position) {
    if (deepest + 1 > kMaxNesting) fail("expression nested too deeply", position);
    return {std::move(e), deepest + 1};
  }

  Parsed binary_node(BinaryOp op, const Parsed& a, const Parsed& b, int position) {
    return over(made(binary(op, a.expr, b.expr), position), std::max(a.depth, b.depth), position);
  }

  // expression := term (('+' | '-') term)*
  Parsed expression() {
    Nesting guard(*this);
    Parsed e = term();
    while (at_symbol('+') || at_symbol('-')) {
      const BinaryOp op = at_symbol('+') ? BinaryOp::Add : BinaryOp::Sub;
      const int position = current_.position;
      advance();
      e = binary_node(op, e, term(), position);
    }
    return e;
  }

  // term := signed (('*' | '/') signed)*
  Parsed term() {
    Parsed e = signed_factor();
    while (at_symbol('*') || at_symbol('/')) {
      const BinaryOp op = at_symbol('*') ? BinaryOp::Mul : BinaryOp::Div;
      const int position = current_.position;
      advance();
      e = binary_node(op, e, signed_factor(), position);
    }
    return e;
  }

  // signed := '-' signed | primary. A minus right before a literal makes a negative
  // constant, so the printed `-0x1p+1` reads back as the constant it was.
  Parsed signed_factor() {
    if (!at_symbol('-')) return primary();
    const int position = current_.position;
    advance();
    if (current_.kind == TokenKind::Number) {
      const float v = -number_value(current_);
      advance();
      return {made(constant(v), position)};
    }
    Nesting guard(*this);
    const Parsed operand = signed_factor();
    return over(made(unary(UnaryOp::Neg, operand.expr), position), operand.depth, position);
  }

  Parsed primary() {
    const Token t = current_;
    switch (t.kind) {
      case TokenKind::Number:
        advance();
        return {made(constant(number_value(t)), t.position)};
      case TokenKind::Name:
        advance();
        return named(t);
      case TokenKind::Symbol:
        if (t.text[0] == '(') {
          advance();
          Parsed e = expression();
          expect(')');
          return e;
        }
        break;
      case TokenKind::End:
        break;
    }
    fail_expected("an expression", t);
  }

  // 'h' or a non-negative integer, inside dot(...) or w[...].
  int head_index() {
    const Token t = current_;
    if (t.kind == TokenKind::Name && t.text == "h") {
      advance();
      return kBoundHead;
    }
    const bool digits_only = t.kind == TokenKind::Number &&
                             t.text.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits_only) fail_expected("a head index ('h' or an integer)", t);
    int head = 0;
    const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), head);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail("head index " + quote(t.text) + " is too large", t.position);
    advance();
    return head;
  }

  // Bare `dot`, `w`, `qsq` mean head h inside a head reduction and head 0 outside.
  int bare_head() const { return reductions_open_ > 0 ? kBoundHead : 0; }

  Parsed named(const Token& name) {
    const std::string_view n = name.text;
    const int at = name.position;
    if (n == "dot") {
      if (!at_symbol('(')) return {made(dot(bare_head()), at)};
      advance();
      const int head = head_index();
      expect(')');
      return {made(dot(head), at)};
    }
    if (const auto p = param_named(n)) {
      if (!param_per_head(*p)) {
        if (at_symbol('['))
          fail(quote(n) + " is per key and takes no head index", current_.position);
        return {made(param(*p), at)};
      }
      if (!at_symbol('[')) return {made(param(*p, bare_head()), at)};
      advance();
      const int head = head_index();
      expect(']');
      return {made(param(*p, head), at)};
    }
    if (n == "h") fail("'h' is only a head index, as in dot(h) or w[h]", name.position);
    const auto u = unary_named(n);
    const auto b = binary_named(n);
    const auto r = reduce_named(n);
    if (!u && !b && !r) {
      if (at_symbol('(')) fail("unknown function " + quote(n), name.position);
      fail("unknown name " + quote(n), name.position);
    }
    expect('(');
    Parsed result;
    if (u) {
      const Parsed operand = expression();
      result = over(made(unary(*u, operand.expr), at), operand.depth, at);
    } else if (b) {
      const Parsed lhs = expression();
      expect(',');
      result = binary_node(*b, lhs, expression(), name.position);
    } else {
      ++reductions_open_;
      const Parsed body = expression();
      --reductions_open_;
      result = over(made(head_reduce(*r, body.expr), at), body.depth, at);
    }
    expect(')');
    return result;
  }

  Lexer lexer_;
  Token current_;
  int nesting_ = 0;
  int reductions_open_ = 0;
  int nodes_ = 0;
};

}  // namespace

Expr parse(std::string_view text) { return Parser(text).program(); }

std::string text_excerpt(std::string_view text, int position) {
  constexpr int kRadius = 32;
  const int size = static_cast<int>(std::min<size_t>(text.size(), 1u << 30));
  const int at = std::clamp(position, 0, size);
  const int first = std::max(0, (position < 0 ? 0 : at) - kRadius);
  const int last = std::min(size, first + 2 * kRadius);
  std::string line = first > 0 ? "..." : "";
  const int caret = static_cast<int>(line.size()) + (at - first);
  for (int i = first; i < last; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    line += std::isprint(c) ? static_cast<char>(c) : '?';
  }
  if (last < size) line += "...";
  if (position < 0) return line;
  return line + "\n" + std::string(caret, ' ') + "^";
}

}  // namespace winnow::ir
