#include "compiler/codegen/emit_cuda.h"

#include <fmt/format.h>

#include "compiler/codegen/embedded_templates.h"

namespace winnow::codegen {
namespace {

// Prints expressions as calls of templates/common/score_ops.cuh; each head reduction becomes a
// helper function with an in-order loop over heads (the order the CPU reference uses).
class FunctorPrinter {
 public:
  explicit FunctorPrinter(int heads) : heads_(heads) {}

  // Head-sum form (see head_sum_node): the sum prints as `hsum`, and inside a term
  // dot(h) and w[h] print as the scalars `dot` and `w`.
  void set_head_sum(const ir::Node* node) { head_sum_ = node; }
  void set_term_scalars(bool on) { term_scalars_ = on; }

  std::string expr(const ir::Expr& e) {
    if (e.get() == head_sum_) return "hsum";
    if (term_scalars_ && e->kind == ir::NodeKind::Dot) return "dot";
    if (term_scalars_ && e->kind == ir::NodeKind::Param)
      return e->param == ir::ParamId::KScale ? "kscale" : "w";
    switch (e->kind) {
      case ir::NodeKind::Const:
        return fmt::format("{:a}f", e->value);
      case ir::NodeKind::Param: {
        const char* name = ir::param_name(e->param);
        if (!ir::param_per_head(e->param)) return fmt::format("a.{}", name);
        return fmt::format("a.{}[{}]", name, head(e->head));
      }
      case ir::NodeKind::Dot:
        return fmt::format("a.dot[{}]", head(e->head));
      case ir::NodeKind::Unary:
        return fmt::format("winnow::op_{}({})", ir::unary_name(e->unary), expr(e->args[0]));
      case ir::NodeKind::Binary:
        return fmt::format("winnow::op_{}({}, {})", ir::binary_name(e->binary),
                           expr(e->args[0]), expr(e->args[1]));
      case ir::NodeKind::HeadReduce:
        return reduction(e);
    }
    throw ir::InternalError("codegen: unknown node kind");
  }

  std::string helpers() const { return helpers_; }

 private:
  static std::string head(int h) { return h == ir::kBoundHead ? "h" : std::to_string(h); }

  std::string reduction(const ir::Expr& e) {
    const int id = next_id_++;
    const std::string body = expr(e->args[0]);
    const bool sum = e->reduce == ir::ReduceOp::Sum;
    helpers_ += fmt::format(
        "  __device__ static float reduce{0}(const winnow::ScoreArgs& a) {{\n"
        "    float acc;\n"
        "    {{ const int h = 0; acc = {1}; }}\n"
        "#pragma unroll\n"
        "    for (int h = 1; h < {2}; ++h) acc = winnow::op_{3}(acc, {1});\n"
        "    return acc;\n"
        "  }}\n",
        id, body, heads_, sum ? "add" : "max");
    return fmt::format("reduce{}(a)", id);
  }

  int heads_;
  const ir::Node* head_sum_ = nullptr;
  bool term_scalars_ = false;
  int next_id_ = 0;
  std::string helpers_;
};

// True when e reads only dot(h), w[h] and constants.
bool is_head_term(const ir::Expr& e) {
  switch (e->kind) {
    case ir::NodeKind::Const: return true;
    case ir::NodeKind::Dot: return e->head == ir::kBoundHead;
    case ir::NodeKind::Param:
      // kscale is the same for every head of a key: a term may read it.
      return (e->param == ir::ParamId::W && e->head == ir::kBoundHead) ||
             e->param == ir::ParamId::KScale;
    case ir::NodeKind::Unary:
    case ir::NodeKind::Binary:
      for (const auto& a : e->args) {
        if (!is_head_term(a)) return false;
      }
      return true;
    case ir::NodeKind::HeadReduce: return false;
  }
  return false;
}

// Counts head reductions and the dots / per-head params outside them.
void count_outside(const ir::Expr& e, int* reduces, int* per_head_outside) {
  if (e->kind == ir::NodeKind::HeadReduce) {
    ++*reduces;
    return;
  }
  if (e->kind == ir::NodeKind::Dot) ++*per_head_outside;
  if (e->kind == ir::NodeKind::Param && ir::param_per_head(e->param)) ++*per_head_outside;
  for (const auto& a : e->args) count_outside(a, reduces, per_head_outside);
}

bool reads_w(const ir::Expr& e) {
  if (e->kind == ir::NodeKind::Param && e->param == ir::ParamId::W) return true;
  for (const auto& a : e->args) {
    if (reads_w(a)) return true;
  }
  return false;
}

// The factor g of a term w[h] * g(dot(h)) (either operand order) that reads no w, or null.
const ir::Expr* weighted_term_factor(const ir::Expr& term) {
  if (term->kind != ir::NodeKind::Binary || term->binary != ir::BinaryOp::Mul) return nullptr;
  for (int i = 0; i < 2; ++i) {
    const ir::Expr& w = term->args[i];
    const ir::Expr& g = term->args[1 - i];
    if (w->kind == ir::NodeKind::Param && w->param == ir::ParamId::W &&
        w->head == ir::kBoundHead && !reads_w(g))
      return &term->args[1 - i];
  }
  return nullptr;
}

const ir::Node* find_reduce(const ir::Expr& e) {
  if (e->kind == ir::NodeKind::HeadReduce) return e.get();
  for (const auto& a : e->args) {
    if (const ir::Node* n = find_reduce(a)) return n;
  }
  return nullptr;
}

}  // namespace

const ir::Node* head_sum_node(const ir::Expr& score) {
  int reduces = 0, outside = 0;
  count_outside(score, &reduces, &outside);
  if (reduces != 1 || outside != 0) return nullptr;
  const ir::Node* r = find_reduce(score);
  if (r->reduce != ir::ReduceOp::Sum || !is_head_term(r->args[0])) return nullptr;
  return r;
}

std::string emit_score_functor(const ir::Expr& score, int heads) {
  FunctorPrinter printer(heads);
  std::string body = printer.expr(score);
  std::string head_sum = "  static constexpr bool kHeadSum = false;\n";
  if (const ir::Node* sum = head_sum_node(score)) {
    // term(dot, w) per head, summed by the kernel in registers; post(hsum, a) after.
    FunctorPrinter term_printer(heads);
    term_printer.set_term_scalars(true);
    FunctorPrinter post_printer(heads);
    post_printer.set_head_sum(sum);
    // A term w[h] * g(dot(h)) is summed as fma(w, g(dot), sum): one rounding per head.
    const ir::Expr* g = weighted_term_factor(sum->args[0]);
    head_sum = fmt::format(
        "  static constexpr bool kHeadSum = true;\n"
        "  __device__ static float term(float dot, float w, float kscale) {{ return {}; }}\n"
        "  static constexpr bool kWeightedTerm = {};  // term = w * unweighted(dot, kscale)\n"
        "  static constexpr bool kReluOfDot = {};  // unweighted(dot, kscale) = relu(dot)\n"
        "  __device__ static float unweighted(float dot, float kscale) {{ return {}; }}\n"
        "  __device__ static float post(float hsum, const winnow::ScoreArgs& a) {{ return {}; }}\n",
        term_printer.expr(sum->args[0]), g != nullptr,
        g && (*g)->kind == ir::NodeKind::Unary && (*g)->unary == ir::UnaryOp::Relu &&
            (*g)->args[0]->kind == ir::NodeKind::Dot,
        g ? term_printer.expr(*g) : "dot",
        post_printer.expr(score));
  }
  return fmt::format(
      "// score: {}\n"
      "struct WinnowScore {{\n{}"
      "  __device__ static float eval(const winnow::ScoreArgs& a) {{ return {}; }}\n{}"
      "}};\n",
      ir::print(score), printer.helpers(), body, head_sum);
}

GeneratedKernel emit_topk(const ir::Expr& score, const plan::KernelSpec& spec,
                          const plan::KernelPlan& plan) {
  const ir::Uses u = ir::uses(score);
  GeneratedKernel g;
  g.entry = kTopkEntry;
  g.source = fmt::format(
      "// Generated by winnow. Compile with NVRTC and the embedded templates/*.cuh.\n"
      "#include \"topk/topk_kernel.cuh\"\n\n"
      "struct WinnowConfig {{\n"
      "  static constexpr int kHeads = {}, kDim = {};\n"
      "  static constexpr int kQElem = {}, kKElem = {};  // {} q, {} k\n"
      "  static constexpr bool kMaterialize = {};\n"
      "  static constexpr int kTopK = {};\n"
      "  static constexpr int kWindow = {};  // 0 dense, 1 ranges, 2 causal\n"
      "  static constexpr bool kSorted = {}, kAbsolute = {};\n"
      "  static constexpr bool kUsesW = {}, kUsesKScale = {}, kUsesQSq = {}, kUsesKSq = {};\n"
      "  static constexpr int kRows = {}, kKeyTile = {}, kThreads = {}, kMathThreads = {};\n"
      "  static constexpr int kBins = {}, kCapacity = {}, kSample = {};\n"
      "  static constexpr int kMma = {};  // element type of mma.sync dots, 0: CUDA cores\n"
      "  static constexpr bool kHeadSums = {};  // heads summed next to the accumulators\n"
      "  static constexpr bool kWgmma = {};  // head sums on warpgroup MMA (sm_90a)\n"
      "  // One CTA per SM, setmaxnreg, two accumulator sets per math warpgroup:\n"
      "  static constexpr bool kPipelined = {};\n"
      "}};\n\n"
      "{}\n"
      "// {}\n"
      "// kmap: the key tensor map of the wgmma path's TMA loads (unused on the other paths).\n"
      "extern \"C\" __global__ void __launch_bounds__({}, {})\n"
      "{}(const winnow::TopkParams p, const __grid_constant__ winnow::TmaMap kmap) {{\n"
      "  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled wgmma tiles\n"
      "  winnow::topk_kernel<WinnowConfig, WinnowScore>(p, &kmap, smem);\n"
      "}}\n",
      spec.heads, spec.head_dim, int(spec.q_type), int(spec.k_type),
      plan::elem_name(spec.q_type), plan::elem_name(spec.k_type), spec.materialize, spec.k,
      int(spec.window), spec.sorted, spec.absolute, u.w, u.kscale, u.qsq, u.ksq,
      plan.rows_per_cta, plan.key_tile, plan.threads, plan.math_threads(), plan.bins,
      plan.capacity, plan.sample, plan.mma, plan.head_sums, plan.wgmma, plan.pipelined,
      emit_score_functor(score, spec.heads),
      plan.pipelined ? "One CTA per SM: its warpgroups move registers between them (setmaxnreg)."
                     : "Two CTAs per SM at least: one CTA's barriers leave the SM idle otherwise.",
      plan.threads, plan.pipelined ? 1 : 2, g.entry);
  g.headers = template_headers();
  return g;
}

std::vector<std::pair<std::string, std::string>> template_headers() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const EmbeddedTemplate& t : embedded_templates()) out.emplace_back(t.name, std::string(t.text, t.size));
  return out;
}

}  // namespace winnow::codegen
