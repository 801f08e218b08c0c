// `winnow bench --anchors`: the engines' JSON lines (../shared/anchors/engines.py) read,
// matched to winnow's rows and turned into ratios, with no GPU; and the command line's
// handling of bad files.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "support.h"
#include "tool_run.h"
#include "tools/anchor_ratios.h"
#include "tools/anchor_records.h"

using Catch::Matchers::Contains;
using winnow::test::run_tool;
using winnow::test::ToolRun;
using namespace winnow::tools;

namespace {

// Lines as engines.py prints them (json.dumps: ", " and ": " separators).
const std::string kNote = R"({"note": "flashinfer topk ext built", "s": 41.3})";
const std::string kLogits =
    R"({"workload": "dsa-prefill", "impl": "deepgemm-logits", "params": {"Q": 8192, "T": 65536, "H": 64, "d": 128, "k": 2048}, "ms_median": 7.72, "ms_min": 7.7, "ms_max": 7.96, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06", "tflops": 1139.6})";
const std::string kTopk =
    R"({"workload": "dsa-prefill", "impl": "flashinfer-topk-only", "params": {"Q": 8192, "T": 65536, "H": 64, "d": 128, "k": 2048}, "ms_median": 2.0, "ms_min": 1.9, "ms_max": 2.2, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06", "rows_differing": 0})";
const std::string kSum =
    R"({"workload": "dsa-prefill", "impl": "deepgemm+flashinfer-topk", "params": {"Q": 8192, "T": 65536, "H": 64, "d": 128, "k": 2048}, "ms_median": 9.72, "ms_min": 9.6, "ms_max": 10.16, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06", "tflops": 905.1, "note": "sum of the two parts' medians"})";
const std::string kOom =
    R"({"workload": "dsa-prefill", "impl": "deepgemm+torch.topk", "params": {"Q": 8192, "T": 1048576, "H": 64, "d": 128, "k": 2048}, "error": "OOM"})";
const std::string kDecode =
    R"({"workload": "dsa-decode", "impl": "deepgemm-paged-logits", "params": {"B": 64, "len": 65536, "next_n": 1, "H": 64, "k": 2048}, "ms_median": 0.214, "ms_min": 0.21, "ms_max": 0.22, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06"})";
const std::string kKnn =
    R"({"workload": "knn-ip", "impl": "torch", "params": {"B": 64, "N": 1048576, "d": 768, "k": 128, "dtype": "fp16"}, "ms_median": 1.178, "ms_min": 1.17, "ms_max": 1.2, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-06"})";

std::string lines(std::initializer_list<std::string> ls) {
  std::string out;
  for (const std::string& l : ls) out += l + "\n";
  return out;
}

AnchorParams dsa_params(double T, double H = 64) {
  return {{"Q", 8192.0}, {"T", T}, {"H", H}, {"d", 128.0}, {"k", 2048.0}};
}

// The AnchorFileError message of parsing `text` as "a.jsonl"; empty when it parsed.
std::string parse_error(const std::string& text) {
  try {
    parse_anchor_records(text, "a.jsonl");
  } catch (const AnchorFileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("anchor records: engines.py's lines parse, notes and error records kept aside", "[tool]") {
  const AnchorFile f = parse_anchor_records(lines({kNote, kLogits, "", kTopk, kSum, kOom, kDecode, kKnn}), "a.jsonl");
  CHECK(f.path == "a.jsonl");
  REQUIRE(f.notes.size() == 1);
  CHECK(f.notes[0].line == 1);
  CHECK(f.notes[0].text == "flashinfer topk ext built");
  REQUIRE(f.records.size() == 6);
  CHECK(f.timed() == 5);
  CHECK(f.failed() == 1);
  const AnchorRecord& r = f.records[0];
  CHECK(r.line == 2);
  CHECK(r.workload == "dsa-prefill");
  CHECK(r.impl == "deepgemm-logits");
  CHECK(r.ms_median == 7.72);
  CHECK(r.gpu == std::optional<std::string>("NVIDIA H100 80GB HBM3"));
  CHECK(r.params == dsa_params(65536));
  CHECK(params_text(r.params) == "Q=8192 T=65536 H=64 d=128 k=2048");
  // The blank line 3 counts: line numbers are the file's.
  CHECK(f.records[1].line == 4);
  // A record with a "note" field is a record, not a note line.
  CHECK(f.records[2].impl == "deepgemm+flashinfer-topk");
  CHECK(f.records[3].error == "OOM");
  CHECK(f.records[3].line == 6);
  CHECK(f.records[5].params.back() == std::pair<std::string, AnchorValue>{"dtype", std::string("fp16")});

  const std::string summary = anchor_file_summary(f);
  CHECK_THAT(summary, Contains("a.jsonl: 5 timed records, 1 note line skipped"));
  CHECK_THAT(summary, Contains("line 6: dsa-prefill deepgemm+torch.topk Q=8192 T=1048576 H=64 d=128 k=2048: skipped, error: OOM"));
  CHECK(anchor_gpu_warnings(f, "NVIDIA H100 80GB HBM3").empty());
  CHECK_THAT(anchor_gpu_warnings(f, "NVIDIA H200"),
             Contains("WARNING: 5 records timed on NVIDIA H100 80GB HBM3, this run is on NVIDIA H200"));
}

TEST_CASE("anchor records: JSON escapes, exponents and Python's NaN are read as JSON says", "[tool]") {
  const AnchorFile f = parse_anchor_records(
      R"({"workload": "w\u00e9\"x\\", "impl": "a\/b\ud83d\ude00", "params": {"s": "t\tu", "n": null, "b": true, "x": -1.5e3}, "ms_median": 2.5E-1, "tflops": NaN, "extra": [1, {"y": []}]})",
      "e.jsonl");
  REQUIRE(f.records.size() == 1);
  CHECK(f.records[0].workload == "w\xc3\xa9\"x\\");
  CHECK(f.records[0].impl == "a/b\xf0\x9f\x98\x80");
  CHECK(f.records[0].ms_median == 0.25);
  const AnchorParams want{{"s", std::string("t\tu")}, {"n", std::monostate{}}, {"b", true}, {"x", -1500.0}};
  CHECK(f.records[0].params == want);
}

TEST_CASE("anchor records: a malformed line is an error naming the file and its line", "[tool]") {
  struct Case {
    std::string line, message;
  };
  const Case cases[] = {
      {"not json", "a.jsonl:3: unexpected 'n' (column 1)"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {}, "ms_median": 1.0)", "a.jsonl:3: expected '}' or ',' after a member"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {}})", "a.jsonl:3: a record needs \"ms_median\""},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {}, "ms_median": "1.0"})", "a.jsonl:3: \"ms_median\" must be a number, not a string"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {}, "ms_median": 0})", "a.jsonl:3: \"ms_median\" must be a positive time, got 0"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {}, "ms_median": -Infinity})", "a.jsonl:3: \"ms_median\" must be a positive time"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": [], "ms_median": 1})", "a.jsonl:3: \"params\" must be an object, not an array"},
      {R"({"workload": "dsa-prefill", "impl": "x", "params": {"T": [1]}, "ms_median": 1})", "a.jsonl:3: params \"T\" must be a number, string, boolean or null"},
      {R"({"workload": "dsa-prefill", "params": {}, "ms_median": 1})", "a.jsonl:3: a record needs \"impl\""},
      {R"({"workload": 7, "impl": "x", "params": {}, "ms_median": 1})", "a.jsonl:3: \"workload\" must be a string, not a number"},
      {R"({"workload": "a", "workload": "b"})", "a.jsonl:3: the key \"workload\" appears twice"},
      {R"({"note": "x"} {"note": "y"})", "a.jsonl:3: text after the JSON object (column 15)"},
      {R"({"note": "x",})", "a.jsonl:3: expected a quoted key"},
      {R"({"note": "a\qb"})", "a.jsonl:3: unknown escape '\\q'"},
      {R"({"note": "x)", "a.jsonl:3: a string without its closing quote"},
      {R"({"note": 01})", "a.jsonl:3: expected '}' or ','"},
      {R"({"note": 1.})", "a.jsonl:3: a number needs digits after '.'"},
      {R"({"note": "\ud800"})", "a.jsonl:3: a lone surrogate"},
      {"[1, 2]", "a.jsonl:3: expected a JSON object, got an array"},
      {R"({"s": 1})", "a.jsonl:3: neither a record (\"workload\", \"impl\") nor a \"note\""},
      {std::string(40, '[') + std::string(40, ']'), "a.jsonl:3: nested deeper than 16 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    const std::string error = parse_error(lines({kNote, kLogits, c.line, kTopk}));
    CHECK_THAT(error, Contains(c.message));
  }
  // The same lines without the bad one parse: each case fails for its line alone.
  CHECK(parse_error(lines({kNote, kLogits, kTopk})).empty());
}

TEST_CASE("anchor records: a file without timed records or with one problem twice is refused", "[tool]") {
  CHECK_THAT(parse_error(""), Contains("a.jsonl: no timed record (0 lines: 0 notes, 0 records with an error)"));
  CHECK_THAT(parse_error(lines({kNote, kOom})), Contains("a.jsonl: no timed record (2 lines: 1 notes, 1 records with an error)"));
  CHECK_THAT(parse_error(lines({kLogits, kTopk, kLogits})),
             Contains("a.jsonl:3: a second dsa-prefill deepgemm-logits record for Q=8192 T=65536 "
                      "H=64 d=128 k=2048 (the first is line 1)"));
  // An error record beside a timed one of the same problem is no conflict.
  CHECK(parse_error(lines({kOom, kLogits, kOom})).empty());
}

TEST_CASE("anchor records: a missing or unreadable file is an error naming it", "[tool]") {
  winnow::test::TempDir dir;
  const std::string missing = (dir.path / "none.jsonl").string();
  CHECK_THROWS_WITH(read_anchor_records(missing), Contains(missing + ": cannot read it"));
  CHECK_THROWS_WITH(read_anchor_records(dir.path.string()), Contains(": cannot read it: a directory"));
  const std::string good = (dir.path / "good.jsonl").string();
  std::ofstream(good) << lines({kNote, kLogits});
  CHECK(read_anchor_records(good).timed() == 1);
}

TEST_CASE("anchor ratios: records match by workload and exactly the row's params", "[tool]") {
  const AnchorFile f = parse_anchor_records(lines({kNote, kLogits, kTopk, kSum, kOom, kDecode, kKnn}), "a.jsonl");
  auto impls = [&](const std::string& workload, const AnchorParams& p) {
    std::string out;
    for (const AnchorRecord* r : matching_records(f, workload, p)) out += r->impl + ";";
    return out;
  };
  CHECK(impls("dsa-prefill", dsa_params(65536)) ==
        "deepgemm-logits;flashinfer-topk-only;deepgemm+flashinfer-topk;");
  // Key order does not matter; values compare as numbers.
  CHECK(impls("dsa-prefill", {{"k", 2048.0}, {"d", 128.0}, {"H", 64.0}, {"T", 65536.0}, {"Q", 8192.0}}) ==
        impls("dsa-prefill", dsa_params(65536)));
  CHECK(impls("dsa-prefill", dsa_params(1048576)) == "deepgemm+torch.topk;");
  CHECK(impls("dsa-prefill", dsa_params(262144)).empty());
  CHECK(impls("dsa-glm", dsa_params(65536)).empty());             // another workload
  CHECK(impls("dsa-prefill-causal", dsa_params(65536)).empty());  // no causal records
  CHECK(impls("dsa-prefill", dsa_params(65536, 32)).empty());     // another H
  // A key more or less on either side is another problem.
  AnchorParams more = dsa_params(65536);
  more.emplace_back("causal", true);
  CHECK(impls("dsa-prefill", more).empty());
  AnchorParams fewer = dsa_params(65536);
  fewer.pop_back();
  CHECK(impls("dsa-prefill", fewer).empty());
  CHECK(impls("dsa-decode", {{"B", 64.0}, {"len", 65536.0}, {"next_n", 1.0}, {"H", 64.0}, {"k", 2048.0}}) ==
        "deepgemm-paged-logits;");
  const AnchorParams knn{{"B", 64.0}, {"N", 1048576.0}, {"d", 768.0}, {"k", 128.0}, {"dtype", std::string("fp16")}};
  CHECK(impls("knn-ip", knn) == "torch;");
  AnchorParams knn_bf16 = knn;
  knn_bf16.back().second = std::string("bf16");
  CHECK(impls("knn-ip", knn_bf16).empty());
}

TEST_CASE("anchor ratios: winnow ms over anchor ms, in the records and the table", "[tool]") {
  const AnchorFile f = parse_anchor_records(lines({kNote, kLogits, kTopk, kSum, kOom, kDecode, kKnn}), "anchors.jsonl");
  const std::vector<AnchorRatio> at64k = anchor_ratios(f, "dsa-prefill", dsa_params(65536), 14.13);
  REQUIRE(at64k.size() == 3);
  CHECK(at64k[0].impl == "deepgemm-logits");
  CHECK(at64k[0].ms == 7.72);
  CHECK(at64k[0].ratio == Approx(14.13 / 7.72).epsilon(1e-12));
  CHECK(at64k[1].ratio == Approx(7.065).epsilon(1e-12));
  CHECK(at64k[2].ratio == Approx(14.13 / 9.72).epsilon(1e-12));
  CHECK(at64k[2].line == 4);
  // Faster than the anchor: below 1.
  CHECK(anchor_ratios(f, "dsa-prefill", dsa_params(65536), 3.86)[0].ratio == Approx(0.5));
  const std::vector<AnchorRatio> at1m = anchor_ratios(f, "dsa-prefill", dsa_params(1048576), 195.24);
  REQUIRE(at1m.size() == 1);
  CHECK(at1m[0].error == "OOM");
  CHECK(at1m[0].ratio == 0);
  // A timed record of the problem comes before the error records, whatever the file order.
  const std::string logits_1m =
      R"({"workload": "dsa-prefill", "impl": "deepgemm-logits", "params": {"Q": 8192, "T": 1048576, "H": 64, "d": 128, "k": 2048}, "ms_median": 147.67})";
  const std::vector<AnchorRatio> both =
      anchor_ratios(parse_anchor_records(lines({kOom, logits_1m}), "b.jsonl"), "dsa-prefill",
                    dsa_params(1048576), 195.24);
  REQUIRE(both.size() == 2);
  CHECK(both[0].impl == "deepgemm-logits");
  CHECK(both[0].line == 2);
  CHECK(both[0].ratio == Approx(195.24 / 147.67).epsilon(1e-12));
  CHECK(both[1].error == "OOM");

  CHECK(anchor_fields("anchors.jsonl", at64k) ==
        R"(, "anchors": {"deepgemm-logits": {"ms": 7.7200, "ratio": 1.8303}, )"
        R"("flashinfer-topk-only": {"ms": 2.0000, "ratio": 7.0650}, )"
        R"("deepgemm+flashinfer-topk": {"ms": 9.7200, "ratio": 1.4537}}, "anchors_file": "anchors.jsonl")");
  CHECK(anchor_fields("anchors.jsonl", at1m) ==
        R"(, "anchors": {"deepgemm+torch.topk": {"error": "OOM"}}, "anchors_file": "anchors.jsonl")");
  CHECK(anchor_fields("anchors.jsonl", {}) == R"(, "anchors": {}, "anchors_file": "anchors.jsonl")");
  // The fields make a record this parser reads back.
  const std::string record = R"({"workload": "dsa-prefill", "impl": "winnow", "params": {}, "ms_median": 14.13)" +
                             anchor_fields("anchors.jsonl", at64k) + "}";
  CHECK(parse_anchor_records(record, "out.jsonl").timed() == 1);

  const std::vector<AnchorRow> rows = {
      {"dsa-prefill", "T=65536 k=2048", "winnow", 14.13, at64k, ""},
      {"dsa-prefill", "T=262144 k=2048", "winnow", 40.5,
       anchor_ratios(f, "dsa-prefill", dsa_params(262144), 40.5), ""},
      {"dsa-prefill", "T=1048576 k=2048", "winnow", 195.24, at1m, ""},
      {"dsa-prefill", "T=65536 k=2048", "winnow", 20.0, {}, "no record (the engines' records are fp8 e4m3)"},
  };
  const std::string table = anchor_table("anchors.jsonl", rows);
  UNSCOPED_INFO(table);  // the format, shown with -s
  CHECK_THAT(table, Contains("against the engines' records of anchors.jsonl: ratio = winnow ms / "
                             "anchor ms (below 1: winnow is faster)"));
  CHECK_THAT(table, Contains("winnow ms  anchor"));
  CHECK_THAT(table, Contains("dsa-prefill         T=65536 k=2048       winnow                   14.130  "
                             "deepgemm-logits                     7.720   1.830\n"));
  CHECK_THAT(table, Contains("  deepgemm+flashinfer-topk            9.720   1.454\n"));
  CHECK_THAT(table, Contains("T=262144 k=2048      winnow                   40.500  no record\n"));
  CHECK_THAT(table, Contains("  deepgemm+torch.topk            error: OOM (line 5)\n"));
  CHECK_THAT(table, Contains("20.000  no record (the engines' records are fp8 e4m3)\n"));

  // Timed records of the run's workloads that no row used are named, grouped by problem;
  // records of workloads the run did not time are not.
  CHECK(unmatched_records(f, rows).empty());
  std::vector<AnchorRow> with_knn = rows;
  with_knn.push_back({"knn-ip", "N=5242880 k=128", "winnow", 2.7, {}, "no record"});
  const std::string unmatched = unmatched_records(f, with_knn);
  CHECK_THAT(unmatched, Contains("no row of this run for knn-ip B=64 N=1048576 d=768 k=128 dtype=fp16 (1 record, line 7)"));
  CHECK(unmatched.find("dsa-decode") == std::string::npos);
  CHECK(unmatched.find("dsa-prefill") == std::string::npos);
}

TEST_CASE("winnow bench --anchors: bad files stop the run with the file and line, before any build", "[tool]") {
  winnow::test::TempDir dir;
  const std::string bad = (dir.path / "bad.jsonl").string();
  std::ofstream(bad) << lines({kNote, kLogits, R"({"workload": "dsa-prefill", "impl": )"});
  const std::string missing = (dir.path / "missing.jsonl").string();
  for (const std::string workload : {"dsa-prefill", "dsa-glm --compile-only", "dsa-decode"}) {
    INFO(workload);
    ToolRun r = run_tool("bench " + workload + " --anchors '" + bad + "'");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(bad + ":3: unexpected end of line"));
    CHECK(r.output.find("kernel") == std::string::npos);  // nothing was built
    r = run_tool("bench " + workload + " --anchors '" + missing + "'");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(missing + ": cannot read it: No such file or directory"));
  }
  const ToolRun r = run_tool("bench dsa-prefill --shards 2 --anchors '" + bad + "'");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--anchors compares one GPU's rows with the engines' records: not with --shards"));
  CHECK(run_tool("bench dsa-prefill --anchors ''").exit_code == 2);
}

// --point: a knob it does not know, or a workload it does not serve, stops the run before
// any build; a bad value is refused where the plan is built, with the validator's message.
TEST_CASE("winnow bench --point: unknown knobs and workloads refused, bad values named", "[tool]") {
  ToolRun r = run_tool("bench dsa-prefill --T 64K --compile-only --point samples=3");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--point: no knob 'samples'"));
  CHECK(r.output.find("materialize") == std::string::npos);  // nothing was built
  r = run_tool("bench csa-1m --point sample_size=1024");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("dsa and knn workloads on one GPU"));
  r = run_tool("bench dsa-prefill --T 64K --compile-only --point bins=3");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("bins = 3 must be a multiple of 32"));
}

// --compile-only reads and matches the records, and says that nothing was timed.
TEST_CASE("winnow bench --anchors with --compile-only matches the records and times nothing", "[tool]") {
  winnow::test::TempDir dir;
  winnow::test::ScopedEnv cache("WINNOW_CACHE_DIR", dir.path.c_str());
  const std::string file = (dir.path / "anchors.jsonl").string();
  const std::string small_knn =
      R"({"workload": "knn-ip", "impl": "torch", "params": {"B": 64, "N": 4096, "d": 128, "k": 16, "dtype": "fp16"}, "ms_median": 0.05})";
  const std::string small_knn_fi =
      R"({"workload": "knn-ip", "impl": "torch.matmul+flashinfer-topk", "params": {"B": 64, "N": 4096, "d": 128, "k": 16, "dtype": "fp16"}, "error": "no kernel"})";
  std::ofstream(file) << lines({kNote, kLogits, small_knn, small_knn_fi});
  const ToolRun r = run_tool("bench knn-ip --T 4096 --k 16,64 --d 128 --compile-only --anchors '" + file + "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("anchors: " + file + ": 2 timed records, 1 note line skipped"));
  CHECK_THAT(r.output, Contains("anchors: line 4: knn-ip torch.matmul+flashinfer-topk B=64 N=4096 d=128 k=16 dtype=fp16: skipped, error: no kernel"));
  CHECK_THAT(r.output, Contains("anchors: N=4096 k=16: 2 records: torch, torch.matmul+flashinfer-topk (error: no kernel)"));
  CHECK_THAT(r.output, Contains("anchors: N=4096 k=64: no record"));
  CHECK_THAT(r.output, Contains("anchors: --compile-only: no time taken, no ratio to the records"));
  CHECK_THAT(r.output, Contains("N=4096 k=16: "));  // the kernels were still built
}

TEST_CASE("winnow bench --help documents --anchors with an example and names no history", "[tool]") {
  for (const char* workload : {"", "dsa-decode "}) {
    const ToolRun r = run_tool(std::string("bench ") + workload + "--help");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("--anchors FILE"));
    CHECK_THAT(r.output, Contains("below 1: winnow is faster"));
    CHECK_THAT(r.output, Contains("bash ../shared/anchors/run.sh .anchors > anchors.jsonl"));
    for (const char* word : {"visit", "session", "issue", "lease"}) CHECK(r.output.find(word) == std::string::npos);
  }
  CHECK_THAT(run_tool("bench --help").output,
             Contains("winnow bench dsa-prefill --T 64K,1M --anchors anchors.jsonl"));
}
