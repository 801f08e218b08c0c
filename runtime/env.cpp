// The one list of winnow's switches (runtime/env.h). A cache-relevant variable changes
// generated code, so its value goes into every cache key; a neutral one never does. The
// macros reach the kernels only through WINNOW_NVRTC_OPTIONS, which is cache-relevant.
#include "runtime/env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace winnow::rt {
namespace {

using K = SwitchKind;
using T = SwitchType;
using S = SwitchStatus;
using R = SwitchReader;

constexpr Switch kRegistry[] = {
    // --- Environment variables of the library and the `winnow` tool.
    {"HOME", K::Environment, T::Path, "", "from the login", S::Stable, R::Library, false,
     "Cache fallback after `XDG_CACHE_HOME`: `$HOME/.cache/winnow`."},
    {"TMPDIR", K::Environment, T::Path, "", "`/tmp`", S::Stable, R::Library, false,
     "Last cache fallback, with no usable `HOME`: `$TMPDIR/winnow-cache-<uid>` (absolute paths "
     "only; used only if the trust rule of `WINNOW_CACHE_DIR` accepts it)."},
    {"XDG_CACHE_HOME", K::Environment, T::Path, "", "unset", S::Stable, R::Library, false,
     "With `WINNOW_CACHE_DIR` unset and this an absolute path, the cache is "
     "`$XDG_CACHE_HOME/winnow`; a relative value is ignored, as the XDG spec asks."},
    // The backend's name and exact version are in every key already (ops/common/jit_module.cpp).
    {"WINNOW_BACKEND", K::Environment, T::Enum, "nvrtc|llvm", "`nvrtc`", S::Stable, R::Library,
     false,
     "What compiles the kernels of a context created without a backend of its own; read when "
     "the context is created; another value fails there, naming the choices (README, "
     "\"Backends\")."},
    // Changes the block plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_BLOCK_ATTENTION_WGMMA", K::Environment, T::Bool, "", "`1` where the shape fits",
     S::Stable, R::Library, false,
     "`0` runs block-sparse attention on the mma.sync kernel instead of the sm_90a wgmma "
     "kernel; `1` asks for wgmma (NotSupported where the shape does not fit); "
     "`BlockProblem::attention_wgmma` overrides it."},
    // Changes the block plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_BLOCK_SCORE_WGMMA", K::Environment, T::Bool, "", "`1` where the shape fits",
     S::Stable, R::Library, false,
     "`0` runs block-select's score pass on the mma.sync kernel instead of the sm_90a wgmma "
     "kernel; `1` asks for wgmma (NotSupported where the shape does not fit); "
     "`BlockProblem::score_wgmma` overrides it."},
    {"WINNOW_CACHE_DIR", K::Environment, T::Path, "",
     "unset: `$XDG_CACHE_HOME/winnow`, else `$HOME/.cache/winnow`, else "
     "`$TMPDIR/winnow-cache-<uid>`",
     S::Stable, R::Library, false,
     "The on-disk kernel cache; used only when it is a real folder owned by the effective user "
     "and not writable by group or others, otherwise kernels stay in memory with a warning."},
    {"WINNOW_DISABLE_DISK_CACHE", K::Environment, T::Bool, "", "unset", S::Stable, R::Library,
     false, "`1` (exactly): contexts keep compiled kernels in memory only."},
    {"WINNOW_DUMP_DIR", K::Environment, T::Path, "",
     "unset: a fresh `winnow-failed-<random>` folder in the temp folder", S::Debug, R::Library,
     false,
     "Where the generated source and its headers are written when a compile fails, to replay "
     "it by hand."},
    // The arch is part of every key already, so forcing it needs no extra key input.
    {"WINNOW_FORCE_ARCH", K::Environment, T::Enum, "sm_90a|sm_100a", "unset: the device's arch",
     S::Stable, R::Library, false,
     "The arch to compile for when a descriptor's `arch` is NULL; another value fails plan "
     "creation."},
    // Picks between two kernels that have their own keys: no key input needed.
    {"WINNOW_KNN_RETRIEVAL", K::Environment, T::Bool, "", "`1`", S::Stable, R::Library, false,
     "`0` keeps one-head dense fp16/bf16 top-k (knn) on sm_90a on the topk kernel instead of "
     "the retrieval mode; another value is refused when the op is created."},
    {"WINNOW_LOG_LEVEL", K::Environment, T::Enum, "error|warn|info|debug", "`warn`", S::Stable,
     R::Library, false,
     "What goes to stderr: `info` adds a line per kernel compiled, `debug` where each kernel "
     "came from and its key; an unknown value counts as `warn`."},
    // Read only when a merge is handed an ncclComm_t (runtime/nccl_library.h).
    {"WINNOW_NCCL_LIBRARY", K::Environment, T::Path, "", "`libnccl.so.2`", S::Stable,
     R::Library, false,
     "The NCCL library `winnowShardMergeNccl` loads at its first call (NOT_SUPPORTED, naming "
     "the path, where it cannot be loaded)."},
    {"WINNOW_NVRTC_OPTIONS", K::Environment, T::String, "", "unset", S::Stable, R::Library, true,
     "Extra compile options, whitespace-separated and sorted (e.g. `-lineinfo`, or the `-D` "
     "macros below; the llvm backend takes the `-D` options only)."},
    // Picks between two paths whose kernels have their own keys: no key input needed.
    {"WINNOW_PAGED_STREAM", K::Environment, T::Bool, "", "`1` where the stream path runs",
     S::Stable, R::Library, false,
     "`0` runs the paged decode op on the gathered path (copy of the touched pages + fused "
     "top-k) instead of the stream path over the cache in place."},
    // Writes what compiles; changes no kernel: no key input.
    {"WINNOW_RECORD_COMPILES", K::Environment, T::Path, "", "unset", S::Debug, R::Library, false,
     "A folder: every kernel request (source, options, program) is written there once, for "
     "`winnow cache replay` with another backend or machine."},
    // Changes the plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_TOPK_PIPELINE", K::Environment, T::Enum, "0|1", "`0`", S::Experimental,
     R::Library, false,
     "`1`: the wgmma topk kernel's pipelined form (one CTA per SM, setmaxnreg, two accumulator "
     "sets; faster only where the plain form fits one CTA per SM); `TopkProblem::plan_knobs` "
     "and tuned points set it too."},

    // --- Environment variables of the Python package (python/winnow).
    {"WINNOW_LIBRARY", K::Environment, T::Path, "",
     "unset: the `libwinnow.so.0` in the package, else the system's", S::Stable, R::Python,
     false, "The C library the package loads through ctypes (`python/winnow/_capi.py`)."},
    {"WINNOW_TORCH_EXT", K::Environment, T::Path, "",
     "unset: `libwinnow_torch.so` beside the `libwinnow.so.0` in use", S::Stable, R::Python,
     false,
     "The torch extension, a path; `0` or `off` keeps the ctypes path; read when `winnow.ops` "
     "is imported (`winnow.fast_ops_status()` says which path was taken)."},

    // --- Environment variables of the tests and scripts.
    {"WINNOW_CI_FUZZ_SECONDS", K::Environment, T::Int, "", "`60`", S::Debug, R::Tests, false,
     "Seconds of fuzzing in CI (`.ci/run`)."},
    {"WINNOW_FUZZ_PRODUCTS", K::Environment, T::Bool, "", "`0`", S::Debug, R::Tests, false,
     "`1`: the score fuzzer also requires regrouped products to share one canonical form."},
    {"WINNOW_FUZZ_SKIP", K::Environment, T::String, "", "unset", S::Debug, R::Tests, false,
     "Comma-separated finding kinds (`eval-nan,eval-finite`) the score fuzzer reports once and "
     "then skips."},
    {"WINNOW_TEST_CACHE_DIR", K::Environment, T::Path, "", "unset: in memory only", S::Debug,
     R::Tests, false,
     "A kernel cache folder for the `[gpu]` topk cases, so a second run of the same build "
     "loads what the first compiled."},
    {"WINNOW_TEST_SEED", K::Environment, T::Int, "", "unset: drawn and printed", S::Debug,
     R::Tests, false, "Seed of the tests' random inputs, to replay a failure."},
    {"WINNOW_TEST_TOOL", K::Environment, T::Path, "", "the `winnow` built with the tests", S::Debug,
     R::Tests, false,
     "The `winnow` binary the tool tests run, where the tests run away from their build folder."},
    {"WINNOW_TEST_SMALL", K::Environment, T::Bool, "", "`0`", S::Debug, R::Tests, false,
     "`1`: the few large `[gpu]` cases shrink so that they finish under compute-sanitizer."},

    // --- Macros the templates test, set with -D through WINNOW_NVRTC_OPTIONS.
    {"WINNOW_BARRIER_AUDIT", K::Macro, T::Bool, "", "`0`", S::Debug, R::Templates, false,
     "`1`: the topk kernel checks that every thread of a CTA passed the same `__syncthreads()` "
     "call sites and traps with a message where one did not (`barrier_audit.cuh`)."},
    {"WINNOW_BLOCK_SCORE_POLY_EXP", K::Macro, T::Int, "0..16", "`0`", S::Experimental,
     R::Templates, false,
     "Column groups of block-select's wgmma score pass whose exponentials run on the FMA pipe "
     "(a polynomial) instead of MUFU."},
    {"WINNOW_EMULATED", K::Macro, T::Bool, "", "undefined", S::Debug, R::Templates, false,
     "Defined by the CPU emulation tests (`tests/*_emulated.cpp`) to compile device code on the "
     "host; never set it for a kernel."},
    {"WINNOW_GATE_REFRESH_TILES", K::Macro, T::Int, "a power of two",
     "unset: 8 tiles, 4 where the buffer is checked every 4", S::Experimental, R::Templates, false,
     "The topk filter raises each row's gate every N key tiles."},
    {"WINNOW_INDEX_ORDER_BITMAP", K::Macro, T::Bool, "", "`1`", S::Experimental, R::Templates,
     false,
     "`0`: index-ordered rows go through the bitonic sort by index instead of a bitmap of the "
     "chosen keys; same outputs."},
    {"WINNOW_KNN_PREFILTER", K::Macro, T::Bool, "", "`1`", S::Experimental, R::Templates, false,
     "`0`: the retrieval filter runs the exact RankKey test on every score instead of behind "
     "a float compare; same outputs."},
    {"WINNOW_KNN_WAIT_LIMIT", K::Macro, T::Int, "", "`1 << 26`", S::Debug, R::Templates, false,
     "Tries of an mbarrier wait in the retrieval and paged stream kernels before they trap "
     "instead of hanging the device."},
    {"WINNOW_KNN_WAIT_REPORT", K::Macro, T::Bool, "", "`0`", S::Debug, R::Templates, false,
     "`1`: before its bounded wait traps, the retrieval kernel prints which thread gave up on "
     "which mbarrier and parity (the printf makes ptxas serialise the wgmma)."},
    {"WINNOW_PHASE_CLOCKS", K::Macro, T::Bool, "", "`0`", S::Debug, R::Templates, false,
     "`1`: CTA 0 of the topk kernel prints the SM cycles spent in each step."},
    {"WINNOW_RELU_FADD", K::Macro, T::Bool, "", "`1`", S::Experimental, R::Templates, false,
     "`0`: the relu of an fp8 dot by max.NaN instead of x + |x| against halved weights."},
};

}  // namespace

std::span<const Switch> switch_registry() { return kRegistry; }

const Switch* find_switch(const char* name) {
  for (const Switch& v : kRegistry)
    if (std::strcmp(v.name, name) == 0) return &v;
  return nullptr;
}

std::optional<std::string> env_get(const char* name) {
  // Reading an undeclared variable is a winnow bug: it could silently miss the cache key.
  const Switch* s = find_switch(name);
  if (!s || s->kind != SwitchKind::Environment)
    throw std::logic_error(std::string("winnow: environment variable ") + name +
                           " is not declared in runtime/env.cpp");
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string cache_relevant_env() {
  std::vector<const Switch*> relevant;
  for (const Switch& v : kRegistry)
    if (v.cache_relevant && v.kind == SwitchKind::Environment) relevant.push_back(&v);
  std::sort(relevant.begin(), relevant.end(),
            [](const Switch* a, const Switch* b) { return std::strcmp(a->name, b->name) < 0; });
  std::string out;
  // An empty value is the same as unset (no NVRTC options): the same key, so a script that
  // always sets the variable hits the kernels compiled without it.
  for (const Switch* v : relevant)
    if (const char* value = std::getenv(v->name); value && *value)
      out += std::string(v->name) + "=" + value + "\n";
  return out;
}

const char* to_string(SwitchKind k) {
  return k == SwitchKind::Environment ? "environment variable" : "compile-time macro";
}

const char* to_string(SwitchType t) {
  switch (t) {
    case SwitchType::Bool: return "bool";
    case SwitchType::Int: return "int";
    case SwitchType::String: return "string";
    case SwitchType::Path: return "path";
    case SwitchType::Enum: return "enum";
  }
  return "?";
}

const char* to_string(SwitchStatus s) {
  switch (s) {
    case SwitchStatus::Stable: return "stable";
    case SwitchStatus::Debug: return "debug";
    case SwitchStatus::Experimental: return "experimental";
  }
  return "?";
}

namespace {

std::string type_text(const Switch& s) {
  std::string t = to_string(s.type);
  if (*s.values) t += std::string(" (") + s.values + ")";
  return t;
}

// A table cell: a literal | would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::vector<const Switch*> sorted(SwitchReader reader) {
  std::vector<const Switch*> out;
  for (const Switch& s : kRegistry)
    if (s.reader == reader) out.push_back(&s);
  std::sort(out.begin(), out.end(),
            [](const Switch* a, const Switch* b) { return std::strcmp(a->name, b->name) < 0; });
  return out;
}

void table(std::string& out, SwitchReader reader, bool with_cache_column) {
  out += with_cache_column ? "| Name | Type | Default | Status | Cache-relevant | Meaning |\n"
                             "|---|---|---|---|---|---|\n"
                           : "| Name | Type | Default | Status | Meaning |\n|---|---|---|---|---|\n";
  for (const Switch* s : sorted(reader)) {
    out += "| `" + std::string(s->name) + "` | " + cell(type_text(*s)) + " | " +
           cell(s->default_value) + " | " + to_string(s->status) + " | ";
    if (with_cache_column) out += s->cache_relevant ? "**yes** | " : "no | ";
    out += cell(s->doc) + " |\n";
  }
}

}  // namespace

std::string switches_markdown() {
  std::string out =
      "<!-- Generated from the registry in runtime/env.cpp: do not edit by hand.\n"
      "     Regenerate with `build/winnow env --markdown > docs/environment.md`;\n"
      "     the [lint] test (tests/test_switches.cpp) fails while this file differs. -->\n"
      "# Environment variables and compile-time switches\n\n"
      "Every switch winnow has is declared once, in the registry of `runtime/env.cpp`: the\n"
      "library reads no environment variable outside it (`env_get` throws for an undeclared\n"
      "name), and a `[lint]` test fails when a template tests, or C++ or Python source reads, a\n"
      "`WINNOW_*` name the registry lacks. A **cache-relevant** variable changes generated\n"
      "code, so its value is part of every kernel cache key; a neutral one never is. Status:\n"
      "**stable** is part of the interface; **debug** checks or reports and changes no\n"
      "result; **experimental** is a variant kept for comparison, not the default.\n\n"
      "## The library and the `winnow` tool\n\n";
  table(out, SwitchReader::Library, true);
  out +=
      "\n## Compile-time macros of the templates\n\n"
      "Set with `-D` through `WINNOW_NVRTC_OPTIONS` (for example\n"
      "`WINNOW_NVRTC_OPTIONS=-DWINNOW_PHASE_CLOCKS=1`), which puts them in the cache key.\n\n";
  table(out, SwitchReader::Templates, false);
  out +=
      "\n## The Python package\n\n"
      "Read by `python/winnow`, not by the library.\n\n";
  table(out, SwitchReader::Python, false);
  out +=
      "\n## The tests and scripts\n\n"
      "Read by the test programs and scripts, not by the library.\n\n";
  table(out, SwitchReader::Tests, false);
  return out;
}

}  // namespace winnow::rt
