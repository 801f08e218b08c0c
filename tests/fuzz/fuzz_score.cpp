// libFuzzer target over the score-program pipeline a user's text goes through:
//   parse -> print -> parse (the written form round-trips)
//   -> verify -> canonicalise -> verify (canonical form is still valid) -> canonicalise
//   (idempotent) -> print -> parse (round trip: equal nodes, equal text, equal hash)
//   -> respelt variants (operands swapped, products regrouped) canonicalise to the same form
//   -> ir::eval of the written and the canonical form on the same inputs (they agree)
//   -> codegen (the score functor, the top-k stub, the block-select stub for one head).
//
// Input: the program text, optionally followed by a NUL byte and "input bytes" that pick
// the number of heads and the values eval reads (see InputReader). Every input is also
// evaluated on a fixed set of special-value vectors, so a plain-text seed alone already
// meets NaN, inf, -0, subnormals and the overflow edge.
//
// Agreement rule of the eval check (DESIGN.md section 2, templates/select/rank_order.cuh): two
// scores agree when both are NaN (any payload, any sign: NaN ranks first, all NaNs
// equal) or when they compare equal as doubles (so -0 agrees with +0, which rank as one
// value). Nothing else agrees: no tolerance, so a rewrite that changes the value by one
// rounding is reported like one that turns NaN into inf.
//
// Products regrouped ((a*b)*c vs a*(b*c)) are checked only with WINNOW_FUZZ_PRODUCTS=1:
// see check_spellings.
//
// A failed check prints "winnow-fuzz finding: <kind>" with the input, then aborts (so
// libFuzzer saves the input as a crash artifact). WINNOW_FUZZ_SKIP=kind,kind reports
// those kinds once and carries on instead: for exploring past a known finding, never in CI.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/codegen/emit_block.h"
#include "compiler/codegen/emit_cuda.h"
#include "compiler/ir/ir.h"
#include "compiler/plan/block_plan.h"
#include "compiler/plan/kernel_plan.h"

namespace {

using namespace winnow;

// More heads than any fixed head index a fuzzed program could reasonably use; programs
// reading a higher head are refused by verify (a user error, not a finding).
constexpr int kMaxHeads = 16;
constexpr int kMaxSeededVectors = 8;
constexpr long kSmemLimit = 227 * 1024;  // sm_90 opt-in shared memory per block

// What a finding is about; also the names WINNOW_FUZZ_SKIP accepts.
const char* const kFindingKinds[] = {
    "unexpected-exception",  // anything but UserError out of parse or verify
    "roundtrip-written",     // parse(print(e)) != e for the written program
    "verify-canonical",      // the canonical form of a valid program fails verify
    "not-idempotent",        // canonicalise(canonicalise(e)) != canonicalise(e)
    "roundtrip-canonical",   // parse(print(c)) != c, or its text or hash differ
    "eval-throws",           // eval of a verified program throws
    "eval-nan",              // one form NaN, the other not
    "eval-inf",              // both non-NaN, one infinite, and they differ
    "eval-finite",           // both finite and different
    "spelling-commuted",     // operands of add/mul/max/min swapped: another canonical form
    "spelling-product",      // a product regrouped ((a*b)*c vs a*(b*c)): another canonical form
    "codegen",               // codegen throws or emits a stub without the functor
};

bool skipped(const char* kind) {
  static const std::set<std::string> skip = [] {
    std::set<std::string> s;
    const char* env = std::getenv("WINNOW_FUZZ_SKIP");
    std::string list = env ? env : "";
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      const std::string name = list.substr(start, comma - start);
      bool known = false;
      for (const char* k : kFindingKinds) known = known || name == k;
      if (!name.empty() && !known)
        std::fprintf(stderr, "winnow-fuzz: WINNOW_FUZZ_SKIP names no finding kind '%s'\n", name.c_str());
      if (!name.empty()) s.insert(name);
      start = comma + 1;
    }
    return s;
  }();
  return skip.count(kind) != 0;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

// Reports a failed check; aborts unless the kind is skipped (then reports it once).
void finding(const char* kind, std::string_view text, const std::string& detail) {
  static std::set<std::string> reported;
  if (skipped(kind)) {
    if (!reported.insert(kind).second) return;
    std::fprintf(stderr, "winnow-fuzz finding (skipped from now on): %s\n  program: \"%s\"\n%s\n",
                 kind, escaped(text).c_str(), detail.c_str());
    return;
  }
  std::fprintf(stderr, "winnow-fuzz finding: %s\n  program: \"%s\"\n%s\n", kind,
               escaped(text).c_str(), detail.c_str());
  std::abort();
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (%.9g)", v, v);
  return buf;
}

// The values one eval reads: per head dot, w and qsq, per key kscale and ksq.
struct InputVector {
  std::vector<double> dot, w, qsq;
  double kscale = 1.0, ksq = 0.0;

  ir::EvalInputs view(int heads) const {
    ir::EvalInputs in;
    in.dot = dot.data();
    in.w = w.data();
    in.qsq = qsq.data();
    in.kscale = kscale;
    in.ksq = ksq;
    in.heads = heads;
    return in;
  }

  std::string describe(int heads) const {
    auto list = [&](const std::vector<double>& v) {
      std::string s = "{";
      for (int h = 0; h < heads; ++h) s += (h ? ", " : "") + number(v[h]);
      return s + "}";
    };
    return "  heads " + std::to_string(heads) + ", dot " + list(dot) + ", w " + list(w) +
           ", qsq " + list(qsq) + ", kscale " + number(kscale) + ", ksq " + number(ksq);
  }
};

// Every value an input can take is a float (the kernel reads fp32); squared norms are
// never negative, so qsq and ksq take the magnitude.
float squared_norm(float v) { return std::fabs(v); }

// Fixed vectors, cycled over the heads: the known NaN-vs-inf case first.
std::vector<InputVector> fixed_vectors(int heads) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Pattern {
    std::vector<float> dot, w, qsq;
    float kscale, ksq;
  };
  const Pattern patterns[] = {
      {{2, -1}, {1}, {1}, inf, 1},
      {{1, 2, 3}, {0.5f, -1.5f}, {4}, 3, 9},
      {{-0.0f, 0.0f}, {-0.0f, 1}, {0}, -0.0f, 0},
      {{nan, 1}, {1}, {1}, 1, 1},
      {{FLT_MAX, FLT_MAX}, {2}, {inf}, -inf, FLT_MAX},
      {{FLT_TRUE_MIN, -3}, {inf, -inf}, {FLT_MIN}, 0, FLT_TRUE_MIN},
      {{0.1f, -0.7f, 1e20f}, {3, -0.25f}, {0.01f}, 1e-20f, 2},
  };
  std::vector<InputVector> out;
  for (const Pattern& p : patterns) {
    InputVector v;
    for (int h = 0; h < heads; ++h) {
      v.dot.push_back(p.dot[h % p.dot.size()]);
      v.w.push_back(p.w[h % p.w.size()]);
      v.qsq.push_back(p.qsq[h % p.qsq.size()]);
    }
    v.kscale = p.kscale;
    v.ksq = p.ksq;
    out.push_back(std::move(v));
  }
  return out;
}

// Reads values from the input bytes: a byte with the top bit set takes the next four
// bytes as a float's bits (any float, NaN payloads included); otherwise its low five
// bits pick a special value. Past the end every value is 1.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  int byte() { return pos_ < size_ ? data_[pos_++] : 0; }

  float value() {
    if (pos_ >= size_) return 1.0f;
    const uint8_t selector = data_[pos_++];
    if ((selector & 0x80) && size_ - pos_ >= 4) {
      uint32_t bits;
      std::memcpy(&bits, data_ + pos_, 4);
      pos_ += 4;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    static const float special[32] = {
        0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f,
        3.0f, -3.0f, 10.0f, -7.0f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
        -std::numeric_limits<float>::quiet_NaN(), FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
        FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e20f, -1e20f, 1e-20f, 65504.0f, 448.0f, 0.1f,
        1.0f / 3.0f, 1e38f, 16777216.0f, 20.0f};
    return special[selector & 0x1f];
  }

  InputVector vector(int heads) {
    InputVector v;
    for (int h = 0; h < heads; ++h) {
      v.dot.push_back(value());
      v.w.push_back(value());
      v.qsq.push_back(squared_norm(value()));
    }
    v.kscale = value();
    v.ksq = squared_norm(value());
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

bool agree(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

const char* disagreement_kind(double written, double canonical) {
  if (std::isnan(written) != std::isnan(canonical)) return "eval-nan";
  if (std::isinf(written) || std::isinf(canonical)) return "eval-inf";
  return "eval-finite";
}

// parse(print(e)) must give e back: equal nodes, equal hash, equal text.
bool round_trips(const ir::Expr& e, std::string* why) {
  const std::string text = ir::print(e);
  ir::Expr again;
  try {
    again = ir::parse(text);
  } catch (const ir::UserError& err) {
    *why = std::string("  printed text does not parse: ") + err.what();
    return false;
  }
  const std::string text_again = ir::print(again);
  if (!ir::equal(e, again) || e->hash != again->hash || text != text_again) {
    char hashes[80];
    std::snprintf(hashes, sizeof hashes, "  hash %016llx, reparsed %016llx",
                  static_cast<unsigned long long>(e->hash),
                  static_cast<unsigned long long>(again->hash));
    *why = "  printed:  " + text + "\n  reparsed: " + text_again + "\n" + hashes;
    return false;
  }
  return true;
}

// Bits for respell: xorshift64, seeded from the program's hash and the input bytes.
class Coin {
 public:
  explicit Coin(uint64_t seed) : state_(seed | 1) {}
  bool flip() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_ & 1;
  }

 private:
  uint64_t state_;
};

enum class Respelling { SwapAll, SwapAndRegroup };

// Another spelling of the same score (DESIGN: one spelling per meaning): operands of the
// commutative operators swapped (all of them, or by coin), and with SwapAndRegroup
// products regrouped by coin, mul(mul(a, b), c) <-> mul(a, mul(b, c)).
ir::Expr respell(const ir::Expr& e, Respelling how, Coin& coin) {
  switch (e->kind) {
    case ir::NodeKind::Const:
    case ir::NodeKind::Param:
    case ir::NodeKind::Dot:
      return e;
    case ir::NodeKind::Unary:
      return ir::unary(e->unary, respell(e->args[0], how, coin));
    case ir::NodeKind::HeadReduce:
      return ir::head_reduce(e->reduce, respell(e->args[0], how, coin));
    case ir::NodeKind::Binary:
      break;
  }
  ir::Expr a = respell(e->args[0], how, coin);
  ir::Expr b = respell(e->args[1], how, coin);
  const ir::BinaryOp op = e->binary;
  const bool commutative = op == ir::BinaryOp::Add || op == ir::BinaryOp::Mul ||
                           op == ir::BinaryOp::Max || op == ir::BinaryOp::Min;
  if (commutative && (how == Respelling::SwapAll || coin.flip())) std::swap(a, b);
  if (how == Respelling::SwapAndRegroup && op == ir::BinaryOp::Mul && coin.flip()) {
    auto is_mul = [](const ir::Expr& x) {
      return x->kind == ir::NodeKind::Binary && x->binary == ir::BinaryOp::Mul;
    };
    if (is_mul(a)) return ir::binary(op, a->args[0], ir::binary(op, a->args[1], b));
    if (is_mul(b)) return ir::binary(op, ir::binary(op, a, b->args[0]), b->args[1]);
  }
  return ir::binary(op, std::move(a), std::move(b));
}

void check_spellings(std::string_view text, const ir::Expr& written, const ir::Expr& canonical,
                     int heads, uint64_t seed) {
  Coin coin(written->hash ^ seed);
  const std::pair<Respelling, const char*> variants[] = {
      {Respelling::SwapAll, "spelling-commuted"},
      {Respelling::SwapAndRegroup, "spelling-product"},
  };
  // Regrouping a product changes its rounding, so no canonical form can both be shared by
  // (a*b)*c and a*(b*c) and agree with each to the bit (the eval check): opt-in, for the
  // product normalisation of issue 11 (3.3), until that conflict is settled.
  static const bool check_products = [] {
    const char* env = std::getenv("WINNOW_FUZZ_PRODUCTS");
    return env && std::string(env) == "1";
  }();
  for (const auto& [how, kind] : variants) {
    if (how == Respelling::SwapAndRegroup && !check_products) continue;
    const ir::Expr variant = respell(written, how, coin);
    ir::Expr variant_canonical;
    try {
      ir::verify(variant, heads);
      variant_canonical = ir::canonicalise(variant);
    } catch (const std::exception& err) {
      finding(kind, text, "  respelt: " + ir::print(variant) + "\n  threw: " + err.what());
      continue;
    }
    if (!ir::equal(variant_canonical, canonical))
      finding(kind, text,
              "  respelt:             " + ir::print(variant) + "\n  canonical:           " +
                  ir::print(canonical) + "\n  respelt's canonical: " + ir::print(variant_canonical));
  }
}

void check_codegen(std::string_view text, const ir::Expr& c, int heads) {
  const std::string printed = ir::print(c);
  try {
    const std::string functor = codegen::emit_score_functor(c, heads);
    if (functor.find("struct WinnowScore") == std::string::npos ||
        functor.find("// score: " + printed + "\n") == std::string::npos)
      finding("codegen", text, "  the functor lacks WinnowScore or the score line:\n" + functor);

    plan::KernelSpec spec;
    spec.heads = heads;
    const ir::Uses u = ir::uses(c);
    spec.reads_norms = u.qsq || u.ksq;
    spec.head_sum_form = codegen::head_sum_node(c) != nullptr;
    spec.wgmma_target = true;
    plan::KernelPlan kernel_plan;
    std::string why;
    if (!plan::choose_plan(spec, kSmemLimit, 0, -1, &kernel_plan, &why))
      finding("codegen", text, "  no top-k plan for " + std::to_string(heads) + " heads: " + why);
    const codegen::GeneratedKernel topk = codegen::emit_topk(c, spec, kernel_plan);
    if (topk.source.find(functor) == std::string::npos || topk.entry != codegen::kTopkEntry)
      finding("codegen", text, "  the top-k stub does not hold the functor");

    if (heads == 1) {
      plan::BlockSpec block_spec;
      plan::BlockPlan block_plan;
      if (plan::choose_block_plan(block_spec, kSmemLimit, &block_plan, &why)) {
        const codegen::GeneratedKernel block = codegen::emit_block_select(c, block_spec, block_plan);
        if (block.source.find("// score: " + printed + "\n") == std::string::npos)
          finding("codegen", text, "  the block-select stub does not hold the functor");
      }
    }
  } catch (const std::exception& err) {
    finding("codegen", text, std::string("  threw: ") + err.what());
  }
}

void check_program(std::string_view text, InputReader inputs) {
  ir::Expr written;
  try {
    written = ir::parse(text);
  } catch (const ir::UserError&) {
    return;  // the user's mistake, reported with a position: fine
  } catch (const std::exception& err) {
    finding("unexpected-exception", text, std::string("  parse threw: ") + err.what());
    return;
  }
  std::string why;
  if (!round_trips(written, &why)) finding("roundtrip-written", text, why);

  // Enough heads for every fixed head the program names, and some variety beyond that.
  const uint64_t seed = inputs.empty() ? 0 : inputs.byte();
  const int seeded_heads = inputs.empty() ? 2 : 1 + static_cast<int>(seed % 4);
  // (A head index may be INT_MAX: compare before adding one.)
  const int max_fixed_head = ir::uses(written).max_fixed_head;
  const int heads = max_fixed_head >= kMaxHeads ? kMaxHeads : std::max(seeded_heads, max_fixed_head + 1);
  try {
    ir::verify(written, heads);
  } catch (const ir::UserError&) {
    return;
  } catch (const std::exception& err) {
    finding("unexpected-exception", text, std::string("  verify threw: ") + err.what());
    return;
  }

  ir::Expr canonical;
  try {
    canonical = ir::canonicalise(written);
    ir::verify(canonical, heads);
  } catch (const std::exception& err) {
    finding("verify-canonical", text,
            std::string("  canonicalise or verify of its result threw: ") + err.what());
    return;
  }
  const std::string canonical_text = ir::print(canonical);
  const ir::Expr twice = ir::canonicalise(canonical);
  if (!ir::equal(twice, canonical) || ir::print(twice) != canonical_text)
    finding("not-idempotent", text,
            "  canonical: " + canonical_text + "\n  again:     " + ir::print(twice));
  if (!round_trips(canonical, &why)) finding("roundtrip-canonical", text, why);
  check_spellings(text, written, canonical, heads, seed);

  std::vector<InputVector> vectors = fixed_vectors(heads);
  for (int i = 0; i < kMaxSeededVectors && !inputs.empty(); ++i) vectors.push_back(inputs.vector(heads));
  for (const InputVector& v : vectors) {
    double a = 0, b = 0;
    try {
      a = ir::eval(written, v.view(heads));
      b = ir::eval(canonical, v.view(heads));
    } catch (const std::exception& err) {
      finding("eval-throws", text, std::string("  eval threw: ") + err.what() + "\n" + v.describe(heads));
      continue;
    }
    if (!agree(a, b))
      finding(disagreement_kind(a, b), text,
              "  canonical: " + canonical_text + "\n" + v.describe(heads) + "\n  written   -> " +
                  number(a) + "\n  canonical -> " + number(b));
  }

  check_codegen(text, canonical, heads);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t text_size = nul ? static_cast<size_t>(nul - data) : size;
  const std::string_view text(reinterpret_cast<const char*>(data), text_size);
  const size_t rest = nul ? size - text_size - 1 : 0;
  check_program(text, InputReader(nul ? nul + 1 : data + size, rest));
  return 0;
}
