// `winnow compile`: one kernel from the command line, through the ops layer: its canonical
// IR, its generated .cu, its PTX, or its cubin. Needs no GPU.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/common/backend_choice.h"
#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "ops/paged/paged_stream.h"
#include "ops/common/topk_op.h"
#include "tools/commands.h"

namespace ops = winnow::ops;
namespace ir = winnow::ir;
namespace backend = winnow::backend;
using winnow::tools::Args;
using winnow::tools::dtype_value;
using winnow::tools::UsageError;

namespace {

constexpr const char* kHelp = R"(Usage: winnow compile (--expr TEXT | --score NAME) --arch ARCH --emit WHAT [options]
       winnow compile --op block-select|block-attention --arch ARCH --emit WHAT [options]
       winnow compile --op paged-stream --arch sm_90a --emit WHAT [options]

Builds one fused score + top-k kernel (or a block-sparse prefill module) and prints one
stage of it. Needs no GPU.

Required:
  --expr TEXT        a score expression, e.g. 'sum_h(w[h] * relu(dot(h))) * kscale'
  --score NAME       a built-in score: relu_mh, ip, l2, cosine
  --arch ARCH        sm_90a or sm_100a
  --emit WHAT        ir     the canonical score IR
                     cu     the generated CUDA source (compiles by hand with the templates)
                     llvm   the optimised LLVM IR (--backend llvm)
                     ptx    the PTX from the backend
                     cubin  the cubin (needs -o)

Options:
  --op OP            topk (default), block-select (pooling, block scores + threshold,
                     CSR) or block-attention (block-sparse attention); the block ops
                     take --heads (32), --kv-heads (8), --dim (128) and --max-seq-len;
                     paged-stream: the paged decode op's stream path
                     (the default on sm_90a; 64 heads, relu_mh or --expr, --k,
                     --sorted, --next-n)
  --next-n N         paged-stream: queries per request, 1..4 (default 1)
  --heads H          query heads per row (default 64 for relu_mh and --expr, else 1)
  --dim D            head dimension, a multiple of 16 (default 128)
  --q-dtype T        fp8, bf16, fp16 or fp32 (default fp8 for relu_mh and --expr, else bf16)
  --k-dtype T        as --q-dtype
  --no-key-scale     relu_mh without the per-key scale
  --k K              top-k, 1..8192 (default 2048)
  --mode M           topk or materialize (default topk)
  --window W         dense, ranges or causal (default dense)
  --causal-ratio M   compression ratio of a causal window (default 1)
  --sorted           indices in rank order
  --absolute         absolute key indices, not offsets from the window start
  --backend NAME     nvrtc or llvm (default: $WINNOW_BACKEND, else nvrtc); llvm is
                     clang 19 + LLVM's NVPTX target + nvJitLink, sm_90a only
  -o FILE            write the output to FILE instead of standard output
  --timings          also print the backend's time per phase for ptx and cubin (NVRTC:
                     C++ front end, NVVM optimizer, PTX to SASS; llvm: clang + LLVM -O3,
                     NVPTX, nvJitLink)
  -h, --help         this text

The compile time goes to standard error.
)";

enum class Emit { Ir, Cu, Llvm, Ptx, Cubin };

Emit parse_emit(const std::string& s) {
  if (s == "ir") return Emit::Ir;
  if (s == "cu") return Emit::Cu;
  if (s == "llvm") return Emit::Llvm;
  if (s == "ptx") return Emit::Ptx;
  if (s == "cubin") return Emit::Cubin;
  throw UsageError("--emit must be ir, cu, llvm, ptx or cubin, not '" + s + "'");
}

ops::Mode parse_mode(const std::string& s) {
  if (s == "topk") return ops::Mode::TopK;
  if (s == "materialize") return ops::Mode::Materialize;
  throw UsageError("--mode must be topk or materialize, not '" + s + "'");
}

ops::WindowKind parse_window(const std::string& s) {
  if (s == "dense") return ops::WindowKind::Dense;
  if (s == "ranges") return ops::WindowKind::Ranges;
  if (s == "causal") return ops::WindowKind::Causal;
  throw UsageError("--window must be dense, ranges or causal, not '" + s + "'");
}

const ops::BuiltinScore& builtin_score(const std::string& name) {
  if (const ops::BuiltinScore* s = ops::find_builtin_score(name)) return *s;
  throw UsageError("--score must be " + ops::builtin_score_choices() + ", not '" + name + "'");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void write_file(const std::string& path, const char* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data, static_cast<std::streamsize>(size));
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
}

void emit_text(const std::optional<std::string>& out, const std::string& text) {
  if (out)
    write_file(*out, text.data(), text.size());
  else
    fmt::print("{}", text);
}

// NVRTC's own table of its phases (--time=FILE: "file, phase, metric, unit" lines; into a
// file that exists already it appends them without the header line), one line per phase
// on standard error.
void print_phase_times(const std::string& csv_path) {
  std::ifstream f(csv_path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("File name,", 0) == 0) continue;  // a header
    std::vector<std::string> cells;
    for (size_t at = 0;;) {
      const size_t comma = line.find(',', at);
      std::string cell = line.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cells.push_back(cell);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (cells.size() == 4) fmt::print(stderr, "  {:<20} {:>7} {}\n", cells[1], cells[2], cells[3]);
  }
}

// The LLVM IR, the PTX or the cubin of a compile request, with the compile time on standard
// error (and the backend's time per phase with `timings`).
int compile_and_emit(backend::CompileRequest req, Emit emit, const std::optional<std::string>& out,
                     double generate_ms, bool timings, const backend::Backend& be_ref) {
  const backend::Backend* be = &be_ref;
  if (emit == Emit::Llvm) {
    const auto t1 = std::chrono::steady_clock::now();
    std::string text;
    try {
      text = be->llvm_ir(req);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--emit llvm: ") + e.what());
    }
    emit_text(out, text);
    fmt::print(stderr, "LLVM IR for {} from {} {} in {:.0f} ms (generated in {:.1f} ms)\n",
               req.arch.str(), be->name(), be->version(), ms_since(t1), generate_ms);
    return 0;
  }
  std::string times_path;
  if (timings && be->name() == "nvrtc") {
    char path[] = "/tmp/winnow-nvrtc-time-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("--timings: cannot create a file in /tmp");
    close(fd);
    times_path = path;
    req.options.push_back("--time=" + times_path);
  }
  const auto t1 = std::chrono::steady_clock::now();
  const backend::CompileResult r = be->compile(req, emit == Emit::Ptx);
  const double compile_ms = ms_since(t1);
  if (!r.log.empty()) fmt::print(stderr, "{}\n", r.log);
  if (emit == Emit::Ptx)
    emit_text(out, r.ptx);
  else
    write_file(*out, r.cubin.data(), r.cubin.size());
  fmt::print(stderr, "compiled for {} with {} {} in {:.0f} ms (generated in {:.1f} ms){}\n",
             req.arch.str(), be->name(), be->version(), compile_ms, generate_ms,
             emit == Emit::Cubin ? fmt::format(", {} bytes to {}", r.cubin.size(), *out) : "");
  if (!times_path.empty()) {
    print_phase_times(times_path);
    std::remove(times_path.c_str());
  }
  if (timings)
    for (const auto& [phase, ms] : r.phase_ms) fmt::print(stderr, "  {:<28} {:>9.1f} ms\n", phase, ms);
  return 0;
}

// `--op paged-stream`: the paged decode op's stream-path module (ops/paged/paged_stream.h).
int emit_paged_stream_op(const ops::PagedProblem& p, Emit emit, const std::optional<std::string>& out,
                         bool timings, const std::function<const backend::Backend&()>& compiler) {
  const auto t0 = std::chrono::steady_clock::now();
  const ops::PagedStream s(p, nullptr);
  const double generate_ms = ms_since(t0);
  if (emit == Emit::Ir) {
    emit_text(out, fmt::format("{}\npaged stream next_n={} k={} sorted={}\n",
                               ir::print(p.score ? p.score : ir::relu_mh(true)), p.next_n, p.k,
                               p.sorted));
    return 0;
  }
  if (emit == Emit::Cu) {
    emit_text(out, s.source());
    fmt::print(stderr, "generated in {:.1f} ms\n", generate_ms);
    return 0;
  }
  return compile_and_emit(s.compile_request(), emit, out, generate_ms, timings, compiler());
}

// `--op block-select` / `--op block-attention`: the block-sparse prefill modules.
int emit_block_op(const std::string& name, const ops::BlockProblem& p, Emit emit,
                  const std::optional<std::string>& out, bool timings,
                  const std::function<const backend::Backend&()>& compiler) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string ir_text, source;
  backend::CompileRequest req;
  auto take = [&](const auto& op) {
    ir_text = op->plan_text();
    source = op->source();
    req = op->compile_request();
  };
  if (name == "block-select") take(ops::BlockSelectOp::create(p, nullptr));
  else if (name == "block-attention") take(ops::BlockAttentionOp::create(p, nullptr));
  else throw UsageError("--op must be topk, block-select or block-attention, not '" + name + "'");
  const double generate_ms = ms_since(t0);
  if (emit == Emit::Ir) {
    emit_text(out, ir_text);
    return 0;
  }
  if (emit == Emit::Cu) {
    emit_text(out, source);
    fmt::print(stderr, "generated in {:.1f} ms\n", generate_ms);
    return 0;
  }
  return compile_and_emit(req, emit, out, generate_ms, timings, compiler());
}

}  // namespace

int run_compile(int argc, char** argv) {
  std::optional<std::string> expr, score, arch, emit_text_arg, out, q_dtype, k_dtype, backend_name;
  std::optional<int> heads;
  bool timings = false;
  std::string op_name = "topk";
  int next_n = 1;
  ops::BlockProblem block;
  bool key_scale = true;
  ops::TopkProblem p;
  Args args(argc, argv);
  std::string flag;
  while (args.next(flag)) {
    if (flag == "-h" || flag == "--help") {
      fmt::print("{}", kHelp);
      return 0;
    } else if (flag == "--expr") {
      expr = args.value();
    } else if (flag == "--score") {
      score = args.value();
    } else if (flag == "--arch") {
      arch = args.value();
    } else if (flag == "--backend") {
      backend_name = args.value();
    } else if (flag == "--emit") {
      emit_text_arg = args.value();
    } else if (flag == "-o" || flag == "--output") {
      out = args.value();
    } else if (flag == "--heads") {
      heads = args.int_value();
    } else if (flag == "--op") {
      op_name = args.value();
    } else if (flag == "--kv-heads") {
      block.kv_heads = args.int_value();
    } else if (flag == "--next-n") {
      next_n = args.int_value();
    } else if (flag == "--max-seq-len") {
      block.max_seq_len = args.int_value();
    } else if (flag == "--dim") {
      p.head_dim = args.int_value();
    } else if (flag == "--q-dtype") {
      q_dtype = args.value();
    } else if (flag == "--k-dtype") {
      k_dtype = args.value();
    } else if (flag == "--no-key-scale") {
      args.no_value();
      key_scale = false;
    } else if (flag == "--k") {
      p.k = args.int_value();
    } else if (flag == "--mode") {
      p.mode = parse_mode(args.value());
    } else if (flag == "--window") {
      p.window = parse_window(args.value());
    } else if (flag == "--causal-ratio") {
      p.causal_ratio = args.int_value();
    } else if (flag == "--sorted") {
      args.no_value();
      p.sorted = true;
    } else if (flag == "--absolute") {
      args.no_value();
      p.absolute_indices = true;
    } else if (flag == "--timings") {
      args.no_value();
      timings = true;
    } else {
      winnow::tools::unknown_argument(flag);
    }
  }
  if (!arch) throw UsageError("--arch is required (sm_90a or sm_100a)");
  if (!emit_text_arg) throw UsageError("--emit is required (ir, cu, llvm, ptx or cubin)");
  const Emit emit = parse_emit(*emit_text_arg);
  if (emit == Emit::Cubin && !out) throw UsageError("--emit cubin needs -o FILE");
  if (timings && (emit == Emit::Ir || emit == Emit::Cu))
    throw UsageError("--timings is for --emit ptx or cubin (ir and cu run no compiler)");
  if (backend_name && *backend_name != "nvrtc" && *backend_name != "llvm")
    throw UsageError("--backend must be " + std::string(backend::kBackendChoices) + ", not '" +
                     *backend_name + "'");
  // Loaded only for the emits that compile: ir and cu need no backend.
  std::unique_ptr<backend::Backend> be;
  const std::function<const backend::Backend&()> compiler = [&]() -> const backend::Backend& {
    if (!be) be = ops::choose_backend(backend_name ? backend_name->c_str() : nullptr);
    return *be;
  };
  const auto target = [&] {
    try {
      return backend::parse_arch(*arch);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format("--arch {}: {}", *arch, e.what()));
    }
  };
  if (op_name == "paged-stream") {
    if (score && *score != "relu_mh") throw UsageError("--op paged-stream takes relu_mh or --expr");
    ops::PagedProblem pp;
    if (expr) {
      pp.score = ir::parse(*expr);
      pp.expression = *expr;
    } else {
      pp.score = ir::relu_mh(key_scale);
    }
    pp.heads = heads.value_or(64);
    pp.k = p.k;
    pp.sorted = p.sorted;
    pp.next_n = next_n;
    pp.max_blocks_per_seq = 1;
    pp.arch = target();
    pp.stream = true;
    try {
      ops::validate_paged_problem(pp);
      ops::validate_paged_stream_problem(pp);
    } catch (const std::exception& e) {
      throw UsageError(std::string("--op paged-stream: ") + e.what());
    }
    return emit_paged_stream_op(pp, emit, out, timings, compiler);
  }
  if (op_name != "topk") {
    if (expr || score) throw UsageError("--expr and --score are for --op topk");
    block.heads = heads.value_or(block.heads);
    block.head_dim = p.head_dim;
    block.arch = target();
    return emit_block_op(op_name, block, emit, out, timings, compiler);
  }
  if (expr.has_value() == score.has_value())
    throw UsageError("give exactly one of --expr TEXT and --score NAME");
  if (!key_scale && score != "relu_mh") throw UsageError("--no-key-scale is for --score relu_mh");

  // Multi-head scores default to the DSA indexer's shape, the others to one head in bf16.
  const bool multi_head = expr || builtin_score(*score).multi_head;
  if (expr) {
    try {
      p.score = ir::parse(*expr);
      p.expression = *expr;
    } catch (const ir::UserError& e) {
      // An excerpt around the error, never the whole text (it may be megabytes).
      std::string shown = ir::text_excerpt(*expr, e.position());
      for (size_t at = shown.find('\n'); at != std::string::npos; at = shown.find('\n', at + 3))
        shown.replace(at, 1, "\n  ");
      fmt::print(stderr, "winnow compile: bad expression: {}\n  {}\n", e.what(), shown);
      return 1;
    }
  } else {
    p.score = builtin_score(*score).program(key_scale);
  }
  p.heads = heads.value_or(multi_head ? 64 : 1);
  p.q_dtype = q_dtype ? dtype_value("--q-dtype", *q_dtype)
                      : (multi_head ? ops::DType::E4M3 : ops::DType::BF16);
  p.k_dtype = k_dtype ? dtype_value("--k-dtype", *k_dtype) : p.q_dtype;
  p.arch = target();

  const auto t0 = std::chrono::steady_clock::now();
  const auto op = ops::TopkOp::create(p, nullptr);
  const double generate_ms = ms_since(t0);
  switch (emit) {
    case Emit::Ir:
      // The canonical program first (the serialisation), then the plan chosen for it.
      emit_text(out, ir::print(op->problem().score) + "\n" + op->plan_text());
      return 0;
    case Emit::Cu:
      emit_text(out, op->source());
      fmt::print(stderr, "generated in {:.1f} ms\n", generate_ms);
      return 0;
    case Emit::Llvm:
    case Emit::Ptx:
    case Emit::Cubin: break;
  }
  return compile_and_emit(op->compile_request(), emit, out, generate_ms, timings, compiler());
}
