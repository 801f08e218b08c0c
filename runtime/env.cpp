// The one list of environment variables winnow reads. A cache-relevant variable changes
// generated code, so its value goes into every cache key; a neutral one never does.
#include "runtime/env.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace winnow::rt {
namespace {

constexpr std::array<EnvVar, 25> kRegistry{{
    {"HOME", false, "home folder: the cache defaults to $HOME/.cache/winnow"},
    {"TMPDIR", false, "without HOME the cache is $TMPDIR/winnow-cache-<uid> (default /tmp)"},
    // The backend's name and exact version are in every key already (ops/jit_module.cpp).
    {"WINNOW_BACKEND", false, "nvrtc (default) or llvm: what compiles the kernels"},
    // Changes the block plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_BLOCK_ATTENTION_CLUSTER", false,
     "\"1\" makes the sm_90a wgmma attention kernel share each KV tile across a cluster of 2 "
     "or 4 heads of a group (TMA multicast) wherever the kernel runs and heads / kv_heads is "
     "even; off by default until measured"},
    // Changes the block plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_BLOCK_ATTENTION_WGMMA", false,
     "\"0\" runs block-sparse attention on the mma.sync kernel instead of the sm_90a wgmma "
     "kernel (the default; \"1\" asks for it, an error where the shape does not fit it)"},
    // Changes the block plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_BLOCK_SCORE_WGMMA", false,
     "\"0\" runs block-select's score pass on the mma.sync kernel instead of the sm_90a wgmma "
     "kernel (the default; \"1\" asks for it, an error where the shape does not fit it)"},
    {"WINNOW_CACHE_DIR", false, "where the kernel cache lives"},
    {"WINNOW_DISABLE_DISK_CACHE", false, "\"1\" keeps cubins in memory only"},
    {"WINNOW_DUMP_DIR", false, "where generated sources are written on compile errors and dumps"},
    // The first tier's options are in its own key; the full build's key is unchanged.
    {"WINNOW_FAST_FIRST_BUILD", false,
     "\"1\": a topk plan missing from the cache is first compiled with NVRTC's -Ofc=max "
     "-split-compile=0 (a usable kernel sooner; ptxas's performance notes then reach stderr) "
     "while the full build compiles in the background; execute switches to it once ready, "
     "outside stream capture (opt-in: the first kernel is hundreds of times slower on large "
     "calls: 4.81 s against 14.1 ms at dsa-prefill 64K on an H100; finish the build before "
     "capturing a graph, docs/environment.md)"},
    // The arch is part of every key already, so forcing it needs no extra key input.
    {"WINNOW_FORCE_ARCH", false, "compile for this arch (sm_90a, sm_100a) instead of the device's"},
    // A launch attribute of the same kernels: no key input.
    {"WINNOW_KNN_PDL", false,
     "\"0\" launches each of the retrieval mode's kernels after the one before it has "
     "completed (the default \"1\": programmatic dependent launch)"},
    // Changes the plan, which is part of the key (the describe() text): no key input.
    {"WINNOW_KNN_RADIX", false,
     "\"0\" takes the retrieval mode's radix fallback rounds away (three rounds from the "
     "stored entries, which can leave a row unanswered: for measuring only); the default "
     "\"1\": rounds refined by radix histograms, exact whatever the order"},
    // Picks between two kernels that have their own keys: no key input needed.
    {"WINNOW_KNN_RETRIEVAL", false,
     "\"0\" keeps one-head dense fp16/bf16 top-k (knn) on the topk kernel instead of the "
     "retrieval mode (the default, \"1\")"},
    // A launch parameter of the same kernel: no key input.
    {"WINNOW_KNN_TIGHTEN", false,
     "\"1\" tightens the retrieval filter's thresholds as the lists fill (opt-in until "
     "run on a GPU; the default \"0\" keeps them fixed for a round)"},
    {"WINNOW_LOG_LEVEL", false, "error|warn|info|debug"},
    // Read only when a merge is handed an ncclComm_t (runtime/nccl_library.h).
    {"WINNOW_NCCL_LIBRARY", false, "the NCCL library to dlopen (default libnccl.so.2)"},
    {"WINNOW_NVRTC_OPTIONS", true, "extra NVRTC options, whitespace-separated"},
    // Picks between two paths whose kernels have their own keys: no key input needed.
    {"WINNOW_PAGED_STREAM", false,
     "the paged decode op's path: unset or \"1\" the stream path wherever it fits (64 heads, "
     "sm_90a, head-sum scores: per-row sample, threshold, filter stream over the cache in "
     "place, exact select), \"0\" the gathered path (copy of the touched pages + fused top-k)"},
    // Changes the stream kernel's source and program text, which are in its key.
    {"WINNOW_PAGED_STREAM_CTAS", false,
     "\"2\" or \"3\": the paged stream kernel's CTAs an SM (launch bounds and ring stages; "
     "the default 2; 3 fits 72 registers at next_n 1), for measuring"},
    // A kernel argument of the stream kernel: no key input.
    {"WINNOW_PAGED_PREFETCH", false,
     "pages (0 to 64) the paged stream kernel's producer hints into L2 ahead of its ring in "
     "the sample pass and round 0 (default 0: off; every setting measured slower on the H100), "
     "for measuring"},
    // Changes the stream kernel's source and program text, which are in its key.
    {"WINNOW_PAGED_WG_PAGES", false,
     "\"1\" or \"2\": pages each math warpgroup of the paged stream kernel takes of a ring "
     "stage (the default 2: one epilogue a page pair, two four-page stages; 1: four two-page "
     "stages), for measuring; three CTAs an SM take 1"},
    // Changes the plan, which is part of the key (the describe() text): no key input.
    // Writes what compiles; changes no kernel: no key input.
    {"WINNOW_RECORD_COMPILES", false,
     "a folder: every kernel request (source, options, program) written there once, for "
     "`winnow cache replay` with another backend on another machine"},
    {"WINNOW_TOPK_PIPELINE", false,
     "\"1\" runs the wgmma path's pipelined form (one CTA per SM, setmaxnreg, two "
     "accumulator sets; opt-in: faster only where the plain form fits one CTA per SM); "
     "\"2\" its filter-warpgroup form (one CTA per SM: four math warpgroups, three filter "
     "warps summing their partials and running the filter, a producer warp; measured slower)"},
    {"XDG_CACHE_HOME", false, "the cache defaults to $XDG_CACHE_HOME/winnow"},
}};

const EnvVar* find(const char* name) {
  for (const EnvVar& v : kRegistry)
    if (std::strcmp(v.name, name) == 0) return &v;
  return nullptr;
}

}  // namespace

std::span<const EnvVar> env_registry() { return kRegistry; }

std::optional<std::string> env_get(const char* name) {
  // Reading an undeclared variable is a winnow bug: it could silently miss the cache key.
  if (!find(name))
    throw std::logic_error(std::string("winnow: environment variable ") + name +
                           " is not declared in runtime/env.cpp");
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string cache_relevant_env() {
  std::vector<const EnvVar*> relevant;
  for (const EnvVar& v : kRegistry)
    if (v.cache_relevant) relevant.push_back(&v);
  std::sort(relevant.begin(), relevant.end(),
            [](const EnvVar* a, const EnvVar* b) { return std::strcmp(a->name, b->name) < 0; });
  std::string out;
  for (const EnvVar* v : relevant)
    if (const char* value = std::getenv(v->name)) out += std::string(v->name) + "=" + value + "\n";
  return out;
}

}  // namespace winnow::rt
