// Score IR: builder, hash, printer, parser, verifier, uses, canonicalise, built-ins, eval.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"
#include "support.h"

using namespace winnow::ir;
using Catch::Matchers::Contains;

namespace {

std::string canonical_text(std::string_view text) { return print(canonicalise(parse(text))); }

// A random program over every kind and operator; it may break verify()'s rules (h outside
// a reduction, nested reductions), which the printer and parser must still round-trip.
class ProgramGenerator {
 public:
  explicit ProgramGenerator(uint64_t seed) : rng_(seed) {}

  Expr program(int depth) {
    const int choice = static_cast<int>(pick(depth <= 0 ? 3 : 7));
    switch (choice) {
      case 0: return random_constant();
      case 1: {
        const auto p = static_cast<ParamId>(pick(4));
        return param(p, param_per_head(p) ? random_head() : kBoundHead);
      }
      case 2: return dot(random_head());
      case 3: return unary(static_cast<UnaryOp>(pick(9)), program(depth - 1));
      case 4: return head_reduce(static_cast<ReduceOp>(pick(2)), program(depth - 1));
      default: return binary(static_cast<BinaryOp>(pick(6)), program(depth - 1), program(depth - 1));
    }
  }

  uint64_t pick(uint64_t n) { return rng_() % n; }

 private:
  int random_head() { return pick(2) ? kBoundHead : static_cast<int>(pick(4)); }

  Expr random_constant() {
    static const float kNice[] = {0.0f, -0.0f, 1.0f, 2.0f, -0.5f, 0.1f, 20.0f, 1e-40f, 3.4028235e38f};
    if (pick(2)) return constant(kNice[pick(std::size(kNice))]);
    float v;
    do {
      const auto bits = static_cast<uint32_t>(rng_());
      std::memcpy(&v, &bits, sizeof v);
    } while (!std::isfinite(v));
    return constant(v);
  }

  std::mt19937_64 rng_;
};

std::vector<Expr> random_programs(uint64_t seed, int count) {
  ProgramGenerator gen(seed);
  std::vector<Expr> out;
  for (int i = 0; i < count; ++i) out.push_back(gen.program(1 + i % 6));
  return out;
}

// Node built by hand, around the builder: what a bug elsewhere in winnow could produce.
Expr malformed(NodeKind kind, std::vector<Expr> args) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->args = std::move(args);
  return n;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("golden programs: canonical print and structural hash are pinned", "[ir]") {
  struct Golden {
    const char* text;
    const char* canonical;
    uint64_t hash;
  };
  // A change here changes what programs mean or which cache entries they share.
  const Golden goldens[] = {
      {"dot", "dot(0)", 0xfe1a162e1fcabe15ull},
      {"max_h(dot(h))", "max_h(dot(h))", 0x05e959dbca5c32dfull},
      {"sum_h(w[h] * relu(dot(h)))", "sum_h(mul(w[h], relu(dot(h))))", 0x3efdf01c2bff2adcull},
      {"sum_h(w[h] * relu(dot(h))) * kscale", "mul(sum_h(mul(w[h], relu(dot(h)))), kscale)",
       0x16b66b9c91a22ec4ull},
      {"sum_h(w[h] * softplus(dot(h))) * kscale",
       "mul(sum_h(mul(w[h], softplus(dot(h)))), kscale)", 0x35bb1ecb230c4ba7ull},
      {"-(qsq[0] + ksq - 2 * dot(0))", "neg(sub(add(qsq[0], ksq), mul(dot(0), 0x1p+1)))",
       0x594001a74a6236e4ull},
      {"dot(0) / sqrt(qsq[0] * ksq)", "div(dot(0), sqrt(mul(qsq[0], ksq)))", 0x8690606c9365de36ull},
      // A per-key factor stays inside the sum it was written in (pulling it out is not exact).
      {"sum_h(kscale * ksq * sigmoid(dot))", "sum_h(mul(sigmoid(dot(h)), mul(ksq, kscale)))",
       0x710d57c61f5bba05ull},
      {"max(dot(0), 0.5) - -1.25e-3", "sub(max(dot(0), 0x1p-1), -0x1.47ae14p-10)",
       0x9e3620071e78043eull},
      {"tanh(exp(abs(log(dot(1)))))", "tanh(exp(abs(log(dot(1)))))", 0x681777ea3e78e42bull},
      {"min(dot(0), dot(1)) * 3 + 1", "add(mul(min(dot(1), dot(0)), 0x1.8p+1), 0x1p+0)",
       0x1a507a30d7e66319ull},
      {"sum_h(w * relu(dot)) / 0x1.8p+3", "div(sum_h(mul(w[h], relu(dot(h)))), 0x1.8p+3)",
       0xeaba3b5ed2cd644dull},
      {"dot(0) * (2 + 3)", "mul(dot(0), 0x1.4p+2)", 0x832fc251bea7943dull},
      {"sqrt(-1) * dot", "mul(sqrt(-0x1p+0), dot(0))", 0x337a148eae804c43ull},
      {"-(2) * dot", "mul(dot(0), -0x1p+1)", 0xa456e54af3a9224bull},
  };
  for (const Golden& g : goldens) {
    INFO(g.text);
    const Expr e = canonicalise(parse(g.text));
    CHECK(print(e) == g.canonical);
    CHECK(e->hash == g.hash);
  }
}

TEST_CASE("golden built-ins are canonical and pinned", "[ir]") {
  CHECK(print(relu_mh(false)) == "sum_h(mul(w[h], relu(dot(h))))");
  CHECK(relu_mh(false)->hash == 0x3efdf01c2bff2adcull);
  CHECK(print(relu_mh(true)) == "mul(sum_h(mul(w[h], relu(dot(h)))), kscale)");
  CHECK(relu_mh(true)->hash == 0x16b66b9c91a22ec4ull);
  CHECK(print(ip()) == "dot(0)");
  CHECK(ip()->hash == 0xfe1a162e1fcabe15ull);
  CHECK(print(l2()) == "neg(sub(add(qsq[0], ksq), mul(dot(0), 0x1p+1)))");
  CHECK(l2()->hash == 0x594001a74a6236e4ull);
  CHECK(print(cosine()) == "div(dot(0), sqrt(mul(qsq[0], ksq)))");
  CHECK(cosine()->hash == 0x8690606c9365de36ull);
  for (const Expr& e : {relu_mh(false), relu_mh(true), ip(), l2(), cosine()}) {
    INFO(print(e));
    CHECK(equal(canonicalise(e), e));
  }
  // The user's spelling of a built-in is the same program, so it shares its cache entry.
  CHECK(equal(canonicalise(parse("sum_h(w[h] * relu(dot(h))) * kscale")), relu_mh(true)));
  CHECK(equal(canonicalise(parse("kscale * sum_h(relu(dot) * w)")), relu_mh(true)));
  CHECK(equal(canonicalise(parse("-(qsq + ksq - 2 * dot)")), l2()));
  // kscale inside the sum is another program (another value with inf or overflow).
  CHECK_FALSE(equal(canonicalise(parse("sum_h(w[h] * relu(dot(h)) * kscale)")), relu_mh(true)));
}

TEST_CASE("the printer writes the forms of each node kind", "[ir]") {
  CHECK(print(dot(0)) == "dot(0)");
  CHECK(print(dot()) == "dot(h)");
  CHECK(print(param(ParamId::W)) == "w[h]");
  CHECK(print(param(ParamId::QSq, 0)) == "qsq[0]");
  CHECK(print(param(ParamId::W, 12)) == "w[12]");
  CHECK(print(param(ParamId::KScale)) == "kscale");
  CHECK(print(param(ParamId::KSq)) == "ksq");
  CHECK(print(unary(UnaryOp::Softplus, dot(0))) == "softplus(dot(0))");
  CHECK(print(binary(BinaryOp::Min, dot(0), dot(1))) == "min(dot(0), dot(1))");
  CHECK(print(head_reduce(ReduceOp::Max, dot())) == "max_h(dot(h))");
  CHECK(std::string(node_kind_name(NodeKind::HeadReduce)) == "HeadReduce");
  CHECK(std::string(node_kind_name(NodeKind::Const)) == "Const");
}

TEST_CASE("constants print as exact C99 hex floats", "[ir]") {
  CHECK(print(constant(2.0f)) == "0x1p+1");
  CHECK(print(constant(1.5f)) == "0x1.8p+0");
  CHECK(print(constant(-2.0f)) == "-0x1p+1");
  CHECK(print(constant(0.0f)) == "0x0p+0");
  CHECK(print(constant(-0.0f)) == "-0x0p+0");
  CHECK(print(constant(0.1f)) == "0x1.99999ap-4");
  CHECK(print(constant(1e-40f)) == "0x1.16c2p-133");  // subnormal float
  CHECK(print(constant(std::numeric_limits<float>::denorm_min())) == "0x1p-149");
  CHECK(print(constant(std::numeric_limits<float>::max())) == "0x1.fffffep+127");
  CHECK(print(constant(-std::numeric_limits<float>::min())) == "-0x1p-126");
}

TEST_CASE("the builder refuses non-finite constants and heads on per-key params", "[ir]") {
  CHECK_THROWS_MATCHES(constant(std::numeric_limits<float>::infinity()), UserError,
                       Catch::Matchers::Message("constants must be finite, found inf"));
  CHECK_THROWS_MATCHES(constant(-std::numeric_limits<float>::infinity()), UserError,
                       Catch::Matchers::Message("constants must be finite, found -inf"));
  CHECK_THROWS_MATCHES(constant(std::numeric_limits<float>::quiet_NaN()), UserError,
                       Catch::Matchers::Message("constants must be finite, found nan"));
  CHECK_THROWS_MATCHES(param(ParamId::KScale, 0), UserError,
                       Catch::Matchers::Message("'kscale' is per key and takes no head index"));
  CHECK_THROWS_AS(dot(-2), UserError);
  CHECK_THROWS_AS(unary(UnaryOp::Neg, nullptr), InternalError);
}

TEST_CASE("structurally equal programs are equal and hash the same", "[ir]") {
  const Expr a = binary(BinaryOp::Mul, head_reduce(ReduceOp::Sum, binary(BinaryOp::Mul,
                        param(ParamId::W), unary(UnaryOp::Relu, dot()))), param(ParamId::KScale));
  const Expr b = parse("mul(sum_h(mul(w[h], relu(dot(h)))), kscale)");
  const Expr c = parse("sum_h(w * relu(dot)) * kscale");
  CHECK(a != b);  // separate nodes...
  CHECK(equal(a, b));  // ...with one structure
  CHECK(equal(a, c));
  CHECK(a->hash == b->hash);
  CHECK(a->hash == c->hash);
}

TEST_CASE("programs that differ in any field differ in hash and equality", "[ir]") {
  const std::vector<Expr> programs = {
      dot(0), dot(1), dot(), param(ParamId::W, 0), param(ParamId::W, 1), param(ParamId::W),
      param(ParamId::QSq, 0), param(ParamId::QSq), param(ParamId::KScale), param(ParamId::KSq),
      constant(0.0f), constant(-0.0f), constant(1.0f), constant(std::nextafter(1.0f, 2.0f)),
      unary(UnaryOp::Relu, dot(0)), unary(UnaryOp::Neg, dot(0)), unary(UnaryOp::Relu, dot(1)),
      binary(BinaryOp::Sub, dot(0), dot(1)), binary(BinaryOp::Sub, dot(1), dot(0)),
      binary(BinaryOp::Add, dot(0), dot(1)), binary(BinaryOp::Max, dot(0), dot(1)),
      head_reduce(ReduceOp::Sum, dot()), head_reduce(ReduceOp::Max, dot()),
      head_reduce(ReduceOp::Sum, unary(UnaryOp::Relu, dot())),
  };
  for (size_t i = 0; i < programs.size(); ++i) {
    for (size_t j = 0; j < programs.size(); ++j) {
      INFO(print(programs[i]) << " vs " << print(programs[j]));
      CHECK(equal(programs[i], programs[j]) == (i == j));
      if (i != j) CHECK(programs[i]->hash != programs[j]->hash);
    }
  }
}

TEST_CASE("parse(print(e)) == e for every program", "[ir]") {
  for (const Expr& e : random_programs(20240601, 500)) {
    const std::string text = print(e);
    INFO(text);
    const Expr back = parse(text);
    REQUIRE(equal(back, e));
    CHECK(back->hash == e->hash);
    CHECK(print(back) == text);
  }
  for (const Expr& e : {relu_mh(true), relu_mh(false), ip(), l2(), cosine()})
    CHECK(equal(parse(print(e)), e));
}

TEST_CASE("the infix form: precedence, unary minus, literals, bare names", "[ir]") {
  CHECK(print(parse("dot + ksq * kscale")) == "add(dot(0), mul(ksq, kscale))");
  CHECK(print(parse("(dot + ksq) * kscale")) == "mul(add(dot(0), ksq), kscale)");
  CHECK(print(parse("dot - ksq - kscale")) == "sub(sub(dot(0), ksq), kscale)");
  CHECK(print(parse("dot / ksq / kscale")) == "div(div(dot(0), ksq), kscale)");
  CHECK(print(parse("dot - ksq * kscale / 2")) == "sub(dot(0), div(mul(ksq, kscale), 0x1p+1))");
  CHECK(print(parse("-dot * ksq")) == "mul(neg(dot(0)), ksq)");
  CHECK(print(parse("- -dot")) == "neg(neg(dot(0)))");
  CHECK(print(parse("dot * -2")) == "mul(dot(0), -0x1p+1)");
  CHECK(print(parse("dot - -2")) == "sub(dot(0), -0x1p+1)");
  CHECK(print(parse("-(qsq[0] + ksq - 2 * dot(0))")) ==
        "neg(sub(add(qsq[0], ksq), mul(0x1p+1, dot(0))))");
  CHECK(print(parse("  max_h( dot (h) )\n")) == "max_h(dot(h))");
  // Decimal and hex literals round to the nearest float.
  CHECK(print(parse("0.1")) == "0x1.99999ap-4");
  CHECK(print(parse(".5")) == "0x1p-1");
  CHECK(print(parse("2.")) == "0x1p+1");
  CHECK(print(parse("1e-3")) == print(constant(1e-3f)));
  CHECK(print(parse("2.5E+2")) == "0x1.f4p+7");
  CHECK(print(parse("0X1.8P1")) == "0x1.8p+1");
  CHECK(print(parse("0x10")) == "0x1p+4");
  // Bare dot, w and qsq: head 0 outside a reduction, h inside one.
  CHECK(print(parse("dot * w * qsq")) == "mul(mul(dot(0), w[0]), qsq[0])");
  CHECK(print(parse("sum_h(dot * w * qsq)")) == "sum_h(mul(mul(dot(h), w[h]), qsq[h]))");
  CHECK(print(parse("sum_h(dot) + dot")) == "add(sum_h(dot(h)), dot(0))");
  CHECK(print(parse("max(dot(0), min(dot(1), dot(2)))")) == "max(dot(0), min(dot(1), dot(2)))");
  CHECK(print(parse("sigmoid(tanh(exp(log(sqrt(abs(neg(softplus(relu(dot)))))))))")) ==
        "sigmoid(tanh(exp(log(sqrt(abs(neg(softplus(relu(dot(0))))))))))");
}

TEST_CASE("parser errors name what was expected or found, and where", "[ir]") {
  struct Failure {
    const char* text;
    const char* message;
    int position;
  };
  const Failure failures[] = {
      {"sum_h(w * relux(dot))", "unknown function 'relux' at 10", 10},
      {"sum_h(w*relux(dot))", "unknown function 'relux' at 8", 8},
      {"dot + foo", "unknown name 'foo' at 6", 6},
      {"relu(dot(0)", "expected ')' at 11, found end of input", 11},
      {"max(dot, 1, 2)", "expected ')' at 10, found ','", 10},
      {"max(dot)", "expected ',' at 7, found ')'", 7},
      {"relu dot", "expected '(' at 5, found 'dot'", 5},
      {"dot(0]", "expected ')' at 5, found ']'", 5},
      {"w[0)", "expected ']' at 3, found ')'", 3},
      {"", "expected an expression at 0, found end of input", 0},
      {"dot * (", "expected an expression at 7, found end of input", 7},
      {"dot * )", "expected an expression at 6, found ')'", 6},
      {"dot(0) dot", "expected end of input at 7, found 'dot'", 7},
      {"dot # 2", "unexpected character '#' at 4", 4},
      {"dot(x)", "expected a head index ('h' or an integer) at 4, found 'x'", 4},
      {"w[1.5]", "expected a head index ('h' or an integer) at 2, found '1.5'", 2},
      {"dot(-1)", "expected a head index ('h' or an integer) at 4, found '-'", 4},
      {"dot(99999999999)", "head index '99999999999' is too large at 4", 4},
      {"kscale[0]", "'kscale' is per key and takes no head index at 6", 6},
      {"ksq[h]", "'ksq' is per key and takes no head index at 3", 3},
      {"h * dot", "'h' is only a head index, as in dot(h) or w[h] at 0", 0},
      {"1e40 * dot", "constant '1e40' is out of float range at 0", 0},
      {"dot * 1e-50", "constant '1e-50' is out of float range at 6", 6},
      {"2dot", "malformed number '2dot' at 0", 0},
      {"dot * 0x1p", "malformed number '0x1p' at 6", 6},
      {"dot * 0x.p1", "malformed number '0x.p1' at 6", 6},
      {"dot * 1.5.2", "malformed number '1.5.2' at 6", 6},
      {"dot * 1e", "malformed number '1e' at 6", 6},
  };
  for (const Failure& f : failures) {
    INFO(f.text);
    try {
      parse(f.text);
      FAIL("parsed without an error");
    } catch (const UserError& e) {
      CHECK(std::string(e.what()) == f.message);
      CHECK(e.position() == f.position);
    }
  }
}

TEST_CASE("the parser refuses text nested deeper than it can take", "[ir]") {
  const std::string deep = std::string(1500, '(') + "dot" + std::string(1500, ')');
  CHECK_THROWS_WITH(parse(deep), Contains("nested too deeply"));
  const std::string minus = std::string(1500, '-') + "dot";
  CHECK_THROWS_WITH(parse(minus), Contains("nested too deeply"));
  // Deep trees without parentheses: a chain of calls (a chain of operators reaches the
  // node limit first: see the next case).
  std::string calls = "dot";
  for (int i = 0; i < 300; ++i) calls = "relu(" + calls + ")";
  CHECK_THROWS_WITH(parse(calls), Contains("nested too deeply"));
  const std::string fine = std::string(50, '(') + "dot" + std::string(50, ')');
  CHECK(print(parse(fine)) == "dot(0)");
  std::string sum_of_32 = "dot(32)";  // 63 nodes, within the node limit
  for (int i = 33; i < 64; ++i) sum_of_32 += " + dot(" + std::to_string(i) + ")";
  CHECK(uses(parse(sum_of_32)).max_fixed_head == 63);
}

TEST_CASE("the parser refuses text longer than the limit and programs over the node limit",
          "[ir]") {
  // Exactly at the limits: accepted.
  const std::string padded = "dot" + std::string(kMaxTextBytes - 3, ' ');
  CHECK(print(parse(padded)) == "dot(0)");
  std::string chain = "dot";
  for (int i = 1; i < (kMaxNodes + 1) / 2; ++i) chain += " + dot";  // 2 n - 1 nodes
  CHECK_NOTHROW(parse(chain));
  // One byte or one node more: refused, with the limit in the message.
  CHECK_THROWS_MATCHES(parse(padded + " "), UserError,
                       Catch::Matchers::Message("expression is 4097 bytes long, more than the "
                                                "maximum 4096"));
  CHECK_THROWS_MATCHES(parse(chain + " + 1"), UserError,
                       Catch::Matchers::Message("expression has more than 64 nodes at " +
                                                std::to_string(chain.size() + 1)));
  // Nodes of every kind count: calls, names, constants, a head reduction.
  std::string terms = "relu(w * dot)";  // 4 nodes, and 1 for each +
  for (int i = 1; i < 12; ++i) terms += " + relu(w * dot)";
  CHECK_NOTHROW(parse("sum_h(" + terms + " + 2 * w)"));  // 12 * 4 + 11 + 1 + 4 = 64 nodes
  CHECK_THROWS_WITH(parse("sum_h(" + terms + " + 2 * w * w)"), Contains("more than 64 nodes"));
  // A 16 MiB text is refused without being read through, and is not quoted.
  const std::string huge(16 << 20, '(');
  try {
    parse(huge);
    FAIL("parsed");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).size() < 100);
  }
}

TEST_CASE("verify counts the nodes of a program built without the parser", "[ir]") {
  // Shared nodes: 21 levels of add(e, e) hold 22 nodes and print as 2^22 - 1.
  Expr e = dot(0);
  for (int i = 0; i < 21; ++i) e = binary(BinaryOp::Add, e, e);
  CHECK_THROWS_MATCHES(verify(e, 1), UserError,
                       Catch::Matchers::Message("program has more than 64 nodes"));
  Expr fine = dot(0);
  for (int i = 0; i < 5; ++i) fine = binary(BinaryOp::Add, fine, fine);  // 63 nodes
  CHECK_NOTHROW(verify(fine, 1));
}

TEST_CASE("messages quote a short excerpt of the text, never all of it", "[ir]") {
  CHECK(text_excerpt("dot + foo", 6) == "dot + foo\n      ^");
  CHECK(text_excerpt("dot + foo") == "dot + foo");
  const std::string long_text = std::string(1000, 'a') + "#" + std::string(1000, 'b');
  const std::string shown = text_excerpt(long_text, 1000);
  CHECK(shown.size() < 2 * 75);
  const size_t newline = shown.find('\n');
  REQUIRE(newline != std::string::npos);
  CHECK(shown.substr(0, 3) == "...");
  CHECK(shown.substr(newline - 3, 3) == "...");
  CHECK(shown[shown.find('^') - newline - 1] == '#');  // the caret is under the '#'
  CHECK(text_excerpt("a\tb\nc", 2) == "a?b?c\n  ^");  // control characters cannot break lines
  CHECK(text_excerpt(long_text).size() == 67);         // 64 characters and "..."
  // A huge token is quoted shortened, with its length.
  const std::string name(3000, 'x');
  try {
    parse("dot + " + name);
    FAIL("parsed");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()) == "unknown name '" + std::string(32, 'x') +
                                       "...' (3000 characters) at 6");
  }
}

TEST_CASE("verify quotes the user's text of a program with no dot product", "[ir]") {
  CHECK_THROWS_MATCHES(verify(parse("1"), 1, "1"), UserError,
                       Catch::Matchers::Message("program '1' reads no dot product (use dot or dot(h))"));
  CHECK_THROWS_MATCHES(verify(parse("kscale * 2"), 1, "kscale * 2"), UserError,
                       Catch::Matchers::Message("program 'kscale * 2' reads no dot product (use dot or dot(h))"));
}

TEST_CASE("verify accepts the built-ins and user programs", "[ir]") {
  for (const Expr& e : {relu_mh(true), relu_mh(false), ip(), l2(), cosine()}) {
    INFO(print(e));
    CHECK_NOTHROW(verify(e, 1));
    CHECK_NOTHROW(verify(e, 64));
  }
  CHECK_NOTHROW(verify(parse("max_h(dot(h)) + w[3] * dot(3)"), 4));
  CHECK_NOTHROW(verify(parse("sum_h(dot) + max_h(w)"), 2));
}

TEST_CASE("verify reports user mistakes", "[ir]") {
  struct Mistake {
    Expr program;
    int heads;
    const char* message;
  };
  const Mistake mistakes[] = {
      {parse("dot(h)"), 1, "head 'h' used outside sum_h/max_h in 'dot(h)'"},
      {parse("w[h] * dot(0)"), 2, "head 'h' used outside sum_h/max_h in 'w[h]'"},
      {parse("sum_h(dot) + qsq[h]"), 2, "head 'h' used outside sum_h/max_h in 'qsq[h]'"},
      {parse("sum_h(max_h(dot(h)))"), 2,
       "nested head reduction 'max_h(dot(h))' inside 'sum_h(max_h(dot(h)))'"},
      {parse("dot(2)"), 2, "head index 2 in 'dot(2)' is out of range for 2 heads"},
      {parse("sum_h(dot) * qsq[3]"), 3, "head index 3 in 'qsq[3]' is out of range for 3 heads"},
      {parse("kscale * 2"), 1, "program 'mul(kscale, 0x1p+1)' reads no dot product (use dot or dot(h))"},
      {parse("sum_h(w)"), 8, "program 'sum_h(w[h])' reads no dot product (use dot or dot(h))"},
      {parse("dot"), 0, "heads must be at least 1, found 0"},
      {parse("dot"), -3, "heads must be at least 1, found -3"},
  };
  for (const Mistake& m : mistakes) {
    INFO(print(m.program) << " with " << m.heads << " heads");
    try {
      verify(m.program, m.heads);
      FAIL("verified without an error");
    } catch (const UserError& e) {
      CHECK(std::string(e.what()) == m.message);
      CHECK(e.position() == -1);
    }
  }
}

TEST_CASE("verify reports malformed nodes as internal errors", "[ir]") {
  CHECK_THROWS_MATCHES(verify(malformed(NodeKind::Unary, {}), 1), InternalError,
                       Catch::Matchers::Message("Unary node has 0 operands, expected 1"));
  CHECK_THROWS_MATCHES(verify(malformed(NodeKind::Binary, {dot(0)}), 1), InternalError,
                       Catch::Matchers::Message("Binary node has 1 operands, expected 2"));
  CHECK_THROWS_MATCHES(verify(malformed(NodeKind::Dot, {dot(0)}), 1), InternalError,
                       Catch::Matchers::Message("Dot node has 1 operands, expected 0"));
  CHECK_THROWS_MATCHES(verify(malformed(NodeKind::HeadReduce, {nullptr}), 1), InternalError,
                       Catch::Matchers::Message("HeadReduce node has a null operand"));
  // Malformed deep inside a well-formed program.
  CHECK_THROWS_AS(verify(unary(UnaryOp::Relu, malformed(NodeKind::Binary, {})), 1), InternalError);
  CHECK_THROWS_AS(verify(nullptr, 1), InternalError);
  // A user mistake whose message would print a malformed node still reports a bug.
  const Expr nested = head_reduce(ReduceOp::Sum, binary(BinaryOp::Add,
                          head_reduce(ReduceOp::Max, dot()), malformed(NodeKind::Unary, {nullptr})));
  CHECK_THROWS_AS(verify(nested, 2), InternalError);
}

TEST_CASE("uses reports the params read, the largest fixed head and reductions", "[ir]") {
  const Uses dsa = uses(relu_mh(true));
  CHECK(dsa.w);
  CHECK(dsa.kscale);
  CHECK_FALSE(dsa.qsq);
  CHECK_FALSE(dsa.ksq);
  CHECK(dsa.max_fixed_head == -1);
  CHECK(dsa.head_reduce);

  const Uses dist = uses(l2());
  CHECK_FALSE(dist.w);
  CHECK_FALSE(dist.kscale);
  CHECK(dist.qsq);
  CHECK(dist.ksq);
  CHECK(dist.max_fixed_head == 0);
  CHECK_FALSE(dist.head_reduce);

  const Uses mixed = uses(parse("dot(3) + w[5] + sum_h(qsq)"));
  CHECK(mixed.w);
  CHECK(mixed.qsq);
  CHECK_FALSE(mixed.kscale);
  CHECK(mixed.max_fixed_head == 5);
  CHECK(mixed.head_reduce);
}

TEST_CASE("canonicalise is idempotent", "[ir]") {
  std::vector<Expr> programs = random_programs(7, 500);
  for (const char* text : {"sum_h(kscale * (w * relu(dot)))", "sum_h(ksq * kscale * w)",
                           "sqrt(-1) + log(0) * (1 / 0)", "max_h(dot * kscale)"})
    programs.push_back(parse(text));
  for (const Expr& e : programs) {
    const Expr once = canonicalise(e);
    INFO(print(e) << " -> " << print(once));
    const Expr twice = canonicalise(once);
    REQUIRE(equal(twice, once));
    CHECK(twice == once);  // nothing to do: the nodes are shared, not rebuilt
  }
}

TEST_CASE("canonicalise ignores the order of commutative operands", "[ir]") {
  ProgramGenerator gen(99);
  for (int i = 0; i < 300; ++i) {
    const Expr a = gen.program(3);
    const Expr b = gen.program(3);
    const auto op = static_cast<BinaryOp>(std::vector<int>{0, 2, 4, 5}[gen.pick(4)]);
    INFO(binary_name(op) << "(" << print(a) << ", " << print(b) << ")");
    CHECK(print(canonicalise(binary(op, a, b))) == print(canonicalise(binary(op, b, a))));
  }
  CHECK(canonical_text("ksq + dot") == canonical_text("dot + ksq"));
  CHECK(canonical_text("dot - ksq") != canonical_text("ksq - dot"));  // sub is not commutative
  CHECK(canonical_text("dot / ksq") != canonical_text("ksq / dot"));
}

TEST_CASE("canonicalise folds constants in float and leaves non-finite results alone", "[ir]") {
  CHECK(canonical_text("dot * (2 + 3)") == "mul(dot(0), 0x1.4p+2)");
  CHECK(canonical_text("dot * -(2)") == "mul(dot(0), -0x1p+1)");
  CHECK(canonical_text("dot + relu(-3)") == "add(dot(0), 0x0p+0)");
  CHECK(canonical_text("dot + max(1, 2) * min(1, 2)") == "add(dot(0), 0x1p+1)");
  CHECK(canonical_text("dot * exp(0)") == "mul(dot(0), 0x1p+0)");
  CHECK(canonical_text("dot * softplus(30)") == "mul(dot(0), 0x1.ep+4)");
  CHECK(canonical_text("dot * sigmoid(0)") == "mul(dot(0), 0x1p-1)");
  CHECK(canonical_text("dot * (0.5 - 0.5)") == "mul(dot(0), 0x0p+0)");
  CHECK(canonical_text("dot * (-0.5 * 0)") == "mul(dot(0), -0x0p+0)");
  // Only exact folds: where float and double disagree the node stays, so the program
  // means the same in the kernel (float) and in ir::eval (double). 1 + 2^-30 is 1 in
  // float; 1e-30 * 1e-30 underflows to 0 in float (then 0 * inf would be NaN, not inf).
  CHECK(canonical_text("dot * (1 + 0x1p-30 - 1)") ==
        "mul(sub(add(0x1p-30, 0x1p+0), 0x1p+0), dot(0))");
  CHECK(canonical_text("dot * (1e-30 * 1e-30)") == "mul(mul(0x1.4484cp-100, 0x1.4484cp-100), dot(0))");
  CHECK(canonical_text("dot * (0.1 * 3)") == "mul(mul(0x1.99999ap-4, 0x1.8p+1), dot(0))");
  CHECK(canonical_text("dot * exp(1)") == "mul(exp(0x1p+0), dot(0))");
  // Would be NaN or inf: not a constant, left for the kernel to compute.
  CHECK(canonical_text("dot * sqrt(-1)") == "mul(sqrt(-0x1p+0), dot(0))");
  CHECK(canonical_text("dot * log(0)") == "mul(log(0x0p+0), dot(0))");
  CHECK(canonical_text("dot * (1 / 0)") == "mul(dot(0), div(0x1p+0, 0x0p+0))");
  CHECK(canonical_text("dot * (3e38 * 10)") == "mul(mul(0x1.c363ccp+127, 0x1.4p+3), dot(0))");
}

TEST_CASE("canonicalise leaves a per-key factor in the head sum it was written in", "[ir]") {
  // sum_h(x * f) -> sum_h(x) * f would change values (see the [ref] case below), so each
  // spelling keeps its own meaning; only the order of commutative operands is normalised.
  CHECK(canonical_text("sum_h(w * relu(dot) * kscale)") ==
        "sum_h(mul(mul(w[h], relu(dot(h))), kscale))");
  CHECK(canonical_text("sum_h(kscale * (w * relu(dot)))") ==
        "sum_h(mul(mul(w[h], relu(dot(h))), kscale))");
  CHECK(canonical_text("sum_h((relu(dot) * w) * kscale)") ==
        "sum_h(mul(mul(w[h], relu(dot(h))), kscale))");
  CHECK(canonical_text("sum_h(w[h] * kscale * relu(dot(h)))") ==
        "sum_h(mul(relu(dot(h)), mul(w[h], kscale)))");
  CHECK(canonical_text("sum_h(ksq * dot)") == "sum_h(mul(ksq, dot(h)))");
  CHECK(canonical_text("sum_h(dot * ksq)") == "sum_h(mul(ksq, dot(h)))");
  CHECK(canonical_text("max_h(dot * kscale)") == "max_h(mul(kscale, dot(h)))");
  CHECK(canonical_text("sum_h(w * relu(dot)) * kscale") ==
        "mul(sum_h(mul(w[h], relu(dot(h)))), kscale)");
}

TEST_CASE("canonicalise keeps the value of a program", "[ir]") {
  const double dots[] = {0.75, -1.5, 2.0, 0.125};
  const double w[] = {0.5, 2.0, -1.0, 3.0};
  const double qsq[] = {4.0, 1.0, 9.0, 0.25};
  EvalInputs in{dots, w, 0.5, qsq, 9.0, 4};
  for (const char* text : {"sum_h(w * relu(dot) * kscale)", "sum_h(kscale * ksq * sigmoid(dot))",
                           "-(qsq + ksq - 2 * dot)", "max(dot(1), dot(0)) + (2 + 3) * min(ksq, w[2])",
                           "sum_h(dot * ksq * kscale) / sqrt(qsq[2] * ksq)"}) {
    INFO(text);
    const Expr e = parse(text);
    CHECK(same_bits(eval(canonicalise(e), in), eval(e, in)));
  }
}

TEST_CASE("eval computes the built-ins on hand-computed values", "[ir]") {
  const double dots[] = {1.0, -2.0};
  const double w[] = {0.5, 3.0};
  const double qsq[] = {4.0, 7.0};
  EvalInputs in{dots, w, 2.0, qsq, 9.0, 2};
  CHECK(eval(relu_mh(false), in) == 0.5);  // 0.5 * relu(1) + 3 * relu(-2)
  CHECK(eval(relu_mh(true), in) == 1.0);   // ... * kscale 2
  CHECK(eval(ip(), in) == 1.0);
  CHECK(eval(l2(), in) == -11.0);          // -(4 + 9 - 2 * 1)
  CHECK(eval(cosine(), in) == Approx(1.0 / 6.0));
  const double three[] = {6.0};
  EvalInputs aligned{three, nullptr, 1.0, qsq, 9.0, 1};
  CHECK(eval(cosine(), aligned) == 1.0);   // 6 / sqrt(4 * 9)
  CHECK(eval(parse("max_h(dot(h))"), in) == 1.0);
  CHECK(eval(parse("sum_h(w[h] * softplus(dot(h))) * kscale"), in) ==
        Approx((0.5 * std::log1p(std::exp(1.0)) + 3.0 * std::log1p(std::exp(-2.0))) * 2.0));
}

TEST_CASE("eval follows the device's scalar semantics", "[ir]") {
  const double zero[] = {0.0};
  EvalInputs in{zero, nullptr, 1.0, nullptr, 0.0, 1};
  auto at = [&](const char* text, double x) {
    const double d[] = {x};
    in.dot = d;
    return eval(parse(text), in);
  };
  CHECK(at("relu(dot)", -1.0) == 0.0);
  CHECK(at("relu(dot)", 2.5) == 2.5);
  CHECK(std::signbit(at("relu(dot)", -0.0)));  // (x < 0) ? 0 : x keeps -0
  CHECK(at("softplus(dot)", 0.0) == Approx(std::log(2.0)));
  CHECK(at("softplus(dot)", 30.0) == 30.0);
  CHECK(at("softplus(dot)", 20.0) == std::log1p(std::exp(20.0)));  // the threshold is x > 20
  CHECK(at("softplus(dot)", -30.0) == std::log1p(std::exp(-30.0)));
  CHECK(at("sigmoid(dot)", 0.0) == 0.5);
  CHECK(at("tanh(dot)", 1.0) == std::tanh(1.0));
  CHECK(at("abs(dot)", -3.0) == 3.0);
  CHECK(at("neg(dot)", 3.0) == -3.0);
  CHECK(at("sqrt(dot)", 16.0) == 4.0);
  CHECK(at("log(exp(dot))", 2.0) == Approx(2.0));
  CHECK(at("1 / dot", 0.0) == std::numeric_limits<double>::infinity());
  CHECK(std::isnan(at("sqrt(dot)", -1.0)));
  // max/min: NaN from either side, and -0 < +0 in either order.
  CHECK(std::isnan(at("max(dot, 1)", kNaN)));
  CHECK(std::isnan(at("max(1, dot)", kNaN)));
  CHECK(std::isnan(at("min(dot, 1)", kNaN)));
  CHECK(std::isnan(at("min(1, dot)", kNaN)));
  CHECK(at("max(dot, 1)", 3.0) == 3.0);
  CHECK(at("min(dot, 1)", 3.0) == 1.0);
  CHECK(same_bits(at("max(dot, 0)", -0.0), 0.0));
  CHECK(same_bits(at("max(0, dot)", -0.0), 0.0));
  CHECK(same_bits(at("min(dot, 0)", -0.0), -0.0));
  CHECK(same_bits(at("min(0, dot)", -0.0), -0.0));
  // The float versions used for constant folding agree.
  CHECK(std::isnan(apply_binary(BinaryOp::Max, 1.0f, std::numeric_limits<float>::quiet_NaN())));
  CHECK(apply_unary(UnaryOp::Relu, -2.0f) == 0.0f);
  CHECK(apply_unary(UnaryOp::Softplus, 21.0f) == 21.0f);
}

TEST_CASE("eval propagates NaN through relu and max_h", "[ir]") {
  const double dots[] = {1.0, kNaN, 5.0};
  const double w[] = {1.0, 1.0, 1.0};
  EvalInputs in{dots, w, 1.0, nullptr, 0.0, 3};
  CHECK(std::isnan(eval(parse("max_h(dot)"), in)));
  CHECK(std::isnan(eval(relu_mh(true), in)));
  CHECK(std::isnan(eval(parse("relu(dot(1))"), in)));
  CHECK(eval(parse("relu(dot(2))"), in) == 5.0);
  const double last_nan[] = {1.0, 5.0, kNaN};
  in.dot = last_nan;
  CHECK(std::isnan(eval(parse("max_h(dot)"), in)));
  in.heads = 2;  // the NaN head is outside the problem
  CHECK(eval(parse("max_h(dot)"), in) == 5.0);
}

TEST_CASE("eval sums heads in order, left to right", "[ir]") {
  const double big = 9007199254740992.0;  // 2^53: big + 1 rounds back to big
  const double dots[] = {big, 1.0, -big};
  EvalInputs in{dots, nullptr, 1.0, nullptr, 0.0, 3};
  CHECK(eval(parse("sum_h(dot)"), in) == 0.0);  // (2^53 + 1) - 2^53; another order gives 1
  CHECK(eval(parse("dot(0) + (dot(1) + dot(2))"), in) == 1.0);
}

TEST_CASE("eval refuses inputs the program needs but was not given", "[ir]") {
  const double dots[] = {1.0, 2.0};
  EvalInputs in{dots, nullptr, 1.0, nullptr, 0.0, 2};
  CHECK_THROWS_MATCHES(eval(relu_mh(false), in), UserError,
                       Catch::Matchers::Message("eval: the program reads w but none was given"));
  CHECK_THROWS_AS(eval(parse("dot(2)"), in), UserError);
  CHECK_THROWS_AS(eval(parse("dot(h)"), in), UserError);
}

// Values that the rewrites of canonicalise could change: non-finite, signed zeros, values
// whose products or sums overflow or underflow in float, and ordinary ones.
static double special_value(std::mt19937_64& rng) {
  static const double kSpecial[] = {kNaN, std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(), 0.0, -0.0,
                                    3.4028234663852886e38, -3.4028234663852886e38, 1e-45,
                                    1.0, -1.0, 2.0, -0.5};
  if (rng() % 3 != 0) return kSpecial[rng() % std::size(kSpecial)];
  return std::uniform_real_distribution<double>(-4.0, 4.0)(rng);
}

TEST_CASE("canonicalise keeps the value to the bit on NaN, inf and -0 inputs", "[ref]") {
  // The case of the issue: sum_h(dot(h) * kscale), kscale = inf, dots {2, -1}: NaN as
  // written (inf + -inf); pulling kscale out of the sum would make it inf, and NaN ranks
  // first, so the selection would change.
  {
    const double dots[] = {2.0, -1.0};
    const EvalInputs in{dots, nullptr, std::numeric_limits<double>::infinity(), nullptr, 0.0, 2};
    const Expr written = parse("sum_h(dot(h) * kscale)");
    CHECK(std::isnan(eval(written, in)));
    CHECK(std::isnan(eval(canonicalise(written), in)));
  }
  const uint64_t seed = winnow::test::test_seed();
  INFO("WINNOW_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<Expr> programs = random_programs(seed ^ 0x5eed, 3000);
  for (const char* text :
       {"sum_h(dot(h) * kscale)", "sum_h(w[h] * relu(dot(h)) * kscale)",
        "sum_h(w[h] * kscale * relu(dot(h)))", "sum_h(kscale * ksq * sigmoid(dot))",
        "sum_h(dot * ksq * kscale)", "max_h(dot * kscale)", "dot * (1e-30 * 1e-30)",
        "dot * (1 + 0x1p-30 - 1)", "kscale * (3e38 * 10) * dot", "min(dot, -0.0) + max(0, dot(1))"})
    programs.push_back(parse(text));
  int compared = 0;
  for (const Expr& written : programs) {
    const Expr canonical = canonicalise(written);
    for (int trial = 0; trial < 8; ++trial) {
      double dots[4], w[4], qsq[4];
      for (int h = 0; h < 4; ++h) {
        dots[h] = special_value(rng);
        w[h] = special_value(rng);
        qsq[h] = special_value(rng);
      }
      const EvalInputs in{dots, w, special_value(rng), qsq, special_value(rng), 4};
      double a = 0.0, b = 0.0;
      try {
        a = eval(written, in);
      } catch (const UserError&) {
        break;  // h outside a reduction, nested reductions: not a program eval takes
      }
      b = eval(canonical, in);
      INFO(print(written) << " -> " << print(canonical) << "; dots " << dots[0] << " "
           << dots[1] << " " << dots[2] << " " << dots[3] << ", w " << w[0] << " " << w[1]
           << " " << w[2] << " " << w[3] << ", kscale " << in.kscale << ", ksq " << in.ksq);
      if (std::isnan(a)) {
        REQUIRE(std::isnan(b));  // NaN payloads may differ; NaN-ness may not
      } else {
        REQUIRE(same_bits(a, b));
      }
      ++compared;
    }
  }
  CHECK(compared > 5000);
}
