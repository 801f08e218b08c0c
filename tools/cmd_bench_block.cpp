// `winnow bench block-select`: FlashPrefill block selection (index building) and the
// block-sparse attention it feeds, on the `structured` and `random` inputs of
// docs/performance.md, against dense attention: torch SDPA (cuDNN) timed by
// bench/sdpa_dense.py and read from --dense, and winnow's own kernel over the dense index
// (alpha = 0) in the same run.
//
// Per (L, input, alpha) the "winnow" record holds the whole call (index + attention, timed
// together) in ms_median, and index_ms, attention_ms and density. floor_ms is docs/performance.md's
// floor: density x dense time. `exact` says the index equals the rule applied on the CPU
// to the block scores the kernel computed (a second run with the scores output).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "compiler/build_id.h"
#include "ops/block/block_tuning.h"
#include "testing/block_harness.h"
#include "ops/common/topk_op.h"
#include "runtime/tuning_db.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

namespace winnow::tools {
namespace {

constexpr const char* kHelp = R"(winnow bench block-select [options]

FlashPrefill block selection + block-sparse attention, bf16, causal, block 128, 32 query
heads / 8 KV heads, d = 128. Times index building, the block-sparse attention and the
whole call per (L, input, alpha), with dense attention beside it. One JSON record per
(L, input, alpha, impl) on stdout; a table on stderr.

Options:
  --L LIST          sequence lengths (K and M suffixes) [4K,16K,64K,128K,256K]
  --alpha LIST      thresholds, comma-separated [0.05,0.1,0.2]
  --input LIST      structured, random or both [structured,random]
  --heads N         query heads [32]      --kv-heads N   KV heads [8]
  --dense FILE      JSON lines from bench/sdpa_dense.py (torch SDPA, impl "torch")
  --no-winnow-dense skip winnow's attention over the dense index
  --no-check        skip the exactness check (a run with block scores, CPU rule)
  --no-tuned        no "winnow-tuned" record: by default, where the tuning database
                    (winnow tune block-select) has a plan for the length that differs
                    from the heuristic one, its whole call is timed beside "winnow"
                    ("ratio_to_winnow": tuned / heuristic)
  --repeats N       timed runs [10]       --warmup N     untimed runs [2]
  --warmup-ms MS    and untimed runs until MS milliseconds of them have run, before each
                    timed series [300]: every series (and bench/sdpa_dense.py's dense
                    baseline, which warms up alike) is timed at the clocks the GPU holds
                    under load, not at those it starts with after idling
  --seed N          inputs seed [1]       --out FILE     append the records to FILE
  --ceilings FILE   accepted and ignored (the floor is density x dense time)
)";

// FlashPrefill v2's fused index builder on this H200 (docs/performance.md), by L.
const std::map<int64_t, double> kFlashPrefillV2IndexMs = {
    {16384, 0.29}, {65536, 1.18}, {131072, 4.12}, {262144, 15.8}};

struct BlockBenchArgs {
  std::vector<int64_t> sizes = {4096, 16384, 65536, 131072, 262144};
  std::vector<float> alphas = {0.05f, 0.1f, 0.2f};
  std::vector<ops::BlockInput> inputs = {ops::BlockInput::Structured, ops::BlockInput::Random};
  int heads = 32, kv_heads = 8;
  std::string dense_path, out_path;
  bool winnow_dense = true, check = true, tuned = true;
  int repeats = 10, warmup = 2;
  double warmup_ms = 300;
  uint64_t seed = 1;
  // "score_wgmma" when block-select's score pass runs the sm_90a wgmma kernel
  // (WINNOW_BLOCK_SCORE_WGMMA=1), "attention_wgmma" when the attention op does
  // (WINNOW_BLOCK_ATTENTION_WGMMA=1; both: "score_wgmma attention_wgmma"), then
  // WINNOW_NVRTC_OPTIONS if set, recorded as "variant"; empty: none.
  std::string variant;
};

std::vector<float> parse_alphas(const std::string& list) {
  std::vector<float> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0.0f && v <= 1.0f))
      throw UsageError("--alpha expects numbers in [0, 1] separated by commas, got '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--alpha needs at least one value");
  return out;
}

std::vector<ops::BlockInput> parse_inputs(const std::string& list) {
  std::vector<ops::BlockInput> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "structured") out.push_back(ops::BlockInput::Structured);
    else if (item == "random") out.push_back(ops::BlockInput::Random);
    else throw UsageError("--input expects structured or random, got '" + item + "'");
  }
  if (out.empty()) throw UsageError("--input needs at least one value");
  return out;
}

bool parse_block_args(int argc, char** argv, BlockBenchArgs& a) {
  Args args(argc, argv);
  bool named = false;
  for (std::string flag; args.next(flag);) {
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "block-select" && !named) named = true;
    else if (flag == "--L" || flag == "--T") a.sizes = parse_sizes(flag, args.value());
    else if (flag == "--alpha") a.alphas = parse_alphas(args.value());
    else if (flag == "--input") a.inputs = parse_inputs(args.value());
    else if (flag == "--heads") a.heads = args.int_value();
    else if (flag == "--kv-heads") a.kv_heads = args.int_value();
    else if (flag == "--dense") a.dense_path = args.value();
    else if (flag == "--no-winnow-dense") args.no_value(), a.winnow_dense = false;
    else if (flag == "--no-check") args.no_value(), a.check = false;
    else if (flag == "--no-tuned") args.no_value(), a.tuned = false;
    else if (flag == "--repeats") a.repeats = args.int_value();
    else if (flag == "--warmup") a.warmup = args.int_value();
    else if (flag == "--warmup-ms") a.warmup_ms = args.int_value();
    else if (flag == "--seed") a.seed = uint64_t(args.int_value());
    else if (flag == "--out") a.out_path = args.value();
    else if (flag == "--ceilings") args.value();  // device_run.sh passes it; the floor here is density x dense
    else unknown_argument(flag);
  }
  if (a.repeats < 1 || a.warmup < 0 || a.warmup_ms < 0)
    throw UsageError("--repeats >= 1, --warmup >= 0 and --warmup-ms >= 0");
  for (int64_t L : a.sizes)
    if (L % ops::kBlockSize != 0)
      throw UsageError(fmt::format("--L {} is not a multiple of the block size 128", L));
  return true;
}

// torch SDPA records (one JSON object per line) by L.
std::map<int64_t, std::string> read_dense(const std::string& path) {
  std::map<int64_t, std::string> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) {
    fmt::print(stderr, "dense: cannot read {}: no torch records\n", path);
    return out;
  }
  for (std::string line; std::getline(in, line);) {
    const auto L = json_number(line, "L");
    if (L && json_number(line, "ms_median")) out[int64_t(*L)] = line;
  }
  return out;
}

struct Meta {
  std::string gpu, commit, date;
};

std::string params(const BlockBenchArgs& a, int64_t L, std::optional<float> alpha,
                   ops::BlockInput input) {
  return fmt::format("{{\"L\": {}, \"heads\": {}, \"kv_heads\": {}, \"d\": 128, \"alpha\": {}, "
                     "\"input\": \"{}\"}}",
                     L, a.heads, a.kv_heads, alpha ? fmt::format("{}", *alpha) : "null",
                     ops::block_input_name(input));
}

// Query-key pairs the attention computes over an index of `kept` blocks: every kept block
// is full except the diagonal ones, which are causal.
double attention_pairs(int64_t kept, int heads, int64_t blocks) {
  const double diag = double(heads) * double(blocks), b = ops::kBlockSize;
  return (double(kept) - diag) * b * b + diag * b * (b + 1) / 2;
}

std::string record(const BlockBenchArgs& a, const Meta& m, const char* impl,
                   const std::string& params_json, const Timing& t, double flop, double floor_ms,
                   size_t extra, std::optional<bool> exact, const std::string& extra_fields) {
  return fmt::format(
      "{{\"workload\": \"block-select\", \"impl\": \"{}\", \"params\": {}, \"ms_median\": {:.4f}, "
      "\"ms_min\": {:.4f}, \"ms_max\": {:.4f}, \"tflops\": {:.2f}, \"gbps\": 0, "
      "\"floor_ms\": {}, \"ratio_to_floor\": {}, \"extra_mem_bytes\": {}, \"exact\": {}, "
      "\"fallbacks\": 0{}{}, \"repeats\": {}, \"warmup\": {}, \"warmup_ms\": {}, \"gpu\": {}, \"commit\": \"{}\", "
      "\"date\": \"{}\"}}",
      impl, params_json, t.median, t.min, t.max, flop / t.median / 1e9,
      floor_ms > 0 ? fmt::format("{:.4f}", floor_ms) : "null",
      floor_ms > 0 ? fmt::format("{:.4f}", t.median / floor_ms) : "null", extra, json_bool(exact),
      extra_fields, a.variant.empty() ? "" : fmt::format(", \"variant\": {}", json_string(a.variant)),
      a.repeats, a.warmup, a.warmup_ms, json_string(m.gpu), m.commit, m.date);
}

struct Row {
  int64_t L;
  std::string input, impl;
  float alpha;
  double index_ms, attention_ms, whole_ms, density, dense_ms;
  std::optional<bool> exact;
};

void print_table(const std::vector<Row>& rows) {
  fmt::print(stderr, "\n{:>7} {:<10} {:<12} {:>6} {:>10} {:>12} {:>10} {:>8} {:>10} {:>9} {:>6}\n",
             "L", "input", "impl", "alpha", "index ms", "attention ms", "whole ms", "density",
             "dense ms", "/dense", "exact");
  for (const Row& r : rows) {
    fmt::print(stderr, "{:>7} {:<10} {:<12} {:>6} {:>10.3f} {:>12.3f} {:>10.3f} {:>8.4f} {:>10.3f} "
                       "{:>9.3f} {:>6}\n",
               r.L, r.input, r.impl, r.alpha, r.index_ms, r.attention_ms, r.whole_ms, r.density,
               r.dense_ms, r.dense_ms > 0 ? r.whole_ms / r.dense_ms : 0.0, json_bool(r.exact));
  }
}

int bench_block_main(int argc, char** argv) {
  BlockBenchArgs a;
  if (!parse_block_args(argc, argv, a)) {
    fmt::print("{}", kHelp);
    return 0;
  }
  if (!bench_gpu_present()) return 1;
  rt::Context ctx(0);
  const Meta meta{ctx.info().name, winnow::build_id(), utc_date()};
  const auto dense_records = read_dense(a.dense_path);
  ops::BlockProblem p;
  p.heads = a.heads;
  p.kv_heads = a.kv_heads;
  p.max_seq_len = *std::max_element(a.sizes.begin(), a.sizes.end());
  p.arch = ops::device_arch(ctx);
  rt::CubinCache cache(rt::DiskStore(rt::default_cache_dir()));
  auto be = backend::make_nvrtc_backend();
  auto t0 = std::chrono::steady_clock::now();
  auto select = ops::BlockSelectOp::create(p, &ctx);
  select->build(cache, *be);
  auto attention = ops::BlockAttentionOp::create(p, &ctx);
  attention->build(cache, *be);
  // The kernels the plans chose, by their plan marks: "score_wgmma" and / or
  // "attention_wgmma", space-separated.
  std::string kernels;
  if (select->plan_text().find("score_wgmma=1") != std::string::npos) kernels = "score_wgmma";
  if (attention->plan_text().find("attention_wgmma=1") != std::string::npos)
    kernels += kernels.empty() ? "attention_wgmma" : " attention_wgmma";
  a.variant = variant_with_nvrtc_options(kernels);
  fmt::print(stderr, "block-select on {} ({}): heads {}/{} d 128, kernels built in {:.1f} s\n"
                     "  {}\n  {}\n",
             meta.gpu, p.arch.str(), p.heads, p.kv_heads, seconds_since(t0),
             select->launch_info(), attention->launch_info());

  std::vector<Row> table;
  bool all_exact = true;
  const rt::TuningDb db(rt::default_cache_dir());
  const ops::BlockPoint heuristic{select->plan_text().find("score_wgmma=1") != std::string::npos ? 1 : 0,
                                  attention->plan_text().find("attention_wgmma=1") != std::string::npos ? 1 : 0};
  for (int64_t L : a.sizes) {
    const int64_t nb = ops::block_count(L);
    // The tuned plan for this length, where the database has one other than the heuristic.
    std::optional<ops::BlockPoint> tuned;
    std::unique_ptr<ops::BlockSelectOp> tuned_select;
    std::unique_ptr<ops::BlockAttentionOp> tuned_attention;
    if (a.tuned) {
      const auto found = ops::find_tuned_block_point(db, ops::block_tuning_key(p, &ctx, *be, L), p, &ctx);
      if (found && !(found->point == heuristic)) {
        tuned = found->point;
        const ops::BlockProblem tp = ops::with_point(p, *tuned);
        tuned_select = ops::BlockSelectOp::create(tp, &ctx);
        tuned_select->build(cache, *be);
        tuned_attention = ops::BlockAttentionOp::create(tp, &ctx);
        tuned_attention->build(cache, *be);
        fmt::print(stderr, "L={}: the tuned plan {} (heuristic {})\n", L, tuned->text(), heuristic.text());
      }
    }
    for (ops::BlockInput input : a.inputs) {
      const char* input_name = ops::block_input_name(input);
      t0 = std::chrono::steady_clock::now();
      const ops::BlockDeviceInputs dev =
          ops::upload_block_inputs(ops::make_block_data(p, L, input, a.seed * 7919 + uint64_t(L)));
      fmt::print(stderr, "L={} {}: inputs generated and uploaded in {:.1f} s\n", L, input_name,
                 seconds_since(t0));
      ops::BlockIndexBuffers index = ops::make_index_buffers(*select, L, false);
      const rt::DeviceBuffer out = ops::make_attention_output(p, L);
      const size_t extra = index.offsets.size() + index.indices.size() + index.workspace.size();
      std::vector<std::string> lines;

      // Dense attention: torch (from --dense), and winnow's kernel over the dense index.
      // The torch record (input-independent) is re-emitted once per L.
      double dense_ms = 0;
      if (auto it = dense_records.find(L); it != dense_records.end()) {
        dense_ms = *json_number(it->second, "ms_median");
        if (input == a.inputs.front()) lines.push_back(it->second);
      }
      if (a.winnow_dense) {
        ops::BlockSelectRule dense_rule;
        dense_rule.alpha = 0.0f;
        ops::execute_block_select(*select, dev, dense_rule, index, nullptr);
        const Timing t = time_launches(
            [&](CUstream s) { ops::execute_block_attention(*attention, dev, index, out, s); },
            a.warmup, a.repeats, "winnow bench", a.warmup_ms);
        const double flop = 4.0 * 128 * attention_pairs(p.heads * winnow::triangle(nb), p.heads, nb);
        lines.push_back(record(a, meta, "winnow-dense", params(a, L, std::nullopt, input), t, flop,
                               0, extra, std::nullopt, ", \"density\": 1"));
        if (dense_ms == 0) dense_ms = t.median;
        table.push_back({L, input_name, "winnow-dense", 0.0f, 0, t.median, t.median, 1.0,
                         dense_ms, std::nullopt});
      }

      for (float alpha : a.alphas) {
        ops::BlockSelectRule rule;
        rule.alpha = alpha;
        const Timing ti = time_launches(
            [&](CUstream s) { ops::execute_block_select(*select, dev, rule, index, s); },
            a.warmup, a.repeats, "winnow bench", a.warmup_ms);
        const ops::BlockIndex got = ops::download_index(p, index);
        const double density = got.density(p.heads, nb);
        const Timing ta = time_launches(
            [&](CUstream s) { ops::execute_block_attention(*attention, dev, index, out, s); },
            a.warmup, a.repeats, "winnow bench", a.warmup_ms);
        const Timing tw = time_launches(
            [&](CUstream s) {
              ops::execute_block_select(*select, dev, rule, index, s);
              ops::execute_block_attention(*attention, dev, index, out, s);
            },
            a.warmup, a.repeats, "winnow bench", a.warmup_ms);
        // A run of `op` with block scores: its index, and whether it is the CPU rule on them.
        auto rule_on_own_scores = [&](const ops::BlockSelectOp& op) {
          ops::BlockIndexBuffers scored = ops::make_index_buffers(op, L, true);
          ops::execute_block_select(op, dev, rule, scored, nullptr);
          rt::check(rt::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
          const std::vector<float> s = ops::download_block_scores(p, scored);
          const ops::BlockIndex want = ops::build_block_index(p, nb, s.data(), rule);
          ops::BlockIndex have = ops::download_index(p, scored);
          const bool same = want.offsets == have.offsets && want.indices == have.indices;
          return std::pair<bool, ops::BlockIndex>{same, std::move(have)};
        };
        std::optional<bool> exact;
        if (a.check) {
          const auto [rule_holds, again] = rule_on_own_scores(*select);
          exact = rule_holds && again.offsets == got.offsets && again.indices == got.indices;
          all_exact = all_exact && *exact;
        }
        const double floor_ms = density * dense_ms;
        const double flop = 4.0 * 128 * attention_pairs(got.kept(), p.heads, nb);
        std::string fields = fmt::format(
            ", \"index_ms\": {:.4f}, \"index_ms_min\": {:.4f}, \"attention_ms\": {:.4f}, "
            "\"attention_ms_min\": {:.4f}, \"density\": {:.6f}, \"kept_blocks\": {}, "
            "\"dense_ms\": {:.4f}, \"dense_impl\": \"{}\", \"ratio_to_dense\": {:.4f}, "
            "\"attention_ratio_to_floor\": {}",
            ti.median, ti.min, ta.median, ta.min, density, got.kept(), dense_ms,
            dense_records.count(L) ? "torch" : "winnow-dense",
            dense_ms > 0 ? tw.median / dense_ms : 0.0,
            floor_ms > 0 ? fmt::format("{:.4f}", ta.median / floor_ms) : "null");
        if (auto v2 = kFlashPrefillV2IndexMs.find(L); v2 != kFlashPrefillV2IndexMs.end())
          fields += fmt::format(", \"flashprefill_v2_index_ms\": {}, \"index_ratio_to_v2\": {:.4f}",
                                v2->second, ti.median / v2->second);
        lines.push_back(record(a, meta, "winnow", params(a, L, alpha, input), tw, flop, floor_ms,
                               extra, exact, fields));
        if (tuned) {
          // The same call on the tuned plan's kernels, its own index buffers; exact when its
          // index is the rule on its own scores.
          ops::BlockIndexBuffers tindex = ops::make_index_buffers(*tuned_select, L, false);
          const Timing tt = time_launches(
              [&](CUstream s) {
                ops::execute_block_select(*tuned_select, dev, rule, tindex, s);
                ops::execute_block_attention(*tuned_attention, dev, tindex, out, s);
              },
              a.warmup, a.repeats, "winnow bench", a.warmup_ms);
          std::optional<bool> texact;
          if (a.check) {
            texact = rule_on_own_scores(*tuned_select).first;
            all_exact = all_exact && *texact;
          }
          lines.push_back(record(a, meta, "winnow-tuned", params(a, L, alpha, input), tt, flop,
                                 floor_ms, extra, texact,
                                 fmt::format(", \"tuned_point\": \"{}\", \"ratio_to_winnow\": {:.4f}",
                                             tuned->text(), tt.median / tw.median)));
          table.push_back({L, input_name, "winnow-tuned", alpha, 0, 0, tt.median, density, dense_ms, texact});
        }
        table.push_back({L, input_name, "winnow", alpha, ti.median, ta.median, tw.median, density,
                         dense_ms, exact});
        fmt::print(stderr, "L={} {} alpha={}: index {:.3f} ms, attention {:.3f} ms, whole {:.3f} "
                           "ms, density {:.4f}, exact {}\n",
                   L, input_name, alpha, ti.median, ta.median, tw.median, density, json_bool(exact));
      }
      emit(a.out_path, lines);
    }
  }
  print_table(table);
  if (!all_exact) fmt::print(stderr, "\nNOT EXACT: an index differs from the rule on its scores\n");
  return all_exact ? 0 : 1;
}

}  // namespace
}  // namespace winnow::tools

int run_bench_block(int argc, char** argv) { return winnow::tools::bench_block_main(argc, argv); }
