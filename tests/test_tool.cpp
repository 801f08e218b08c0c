// The `winnow` command line, run as a user runs it: exit codes and messages of bad
// arguments (checked before anything is compiled, allocated or written).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>

#include "runtime/cuda_driver.h"
#include "support.h"
#include "tool_run.h"

using Catch::Matchers::Contains;

using winnow::test::run_tool;
using winnow::test::ToolRun;

TEST_CASE("winnow demo refuses bad sizes and an unwritable --json as usage errors", "[tool]") {
  std::mt19937_64 rng(winnow::test::test_seed());
  const int negative = -1 - int(rng() % 1000);
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--rows " + std::to_string(negative),
       "--rows must be at least 1, got " + std::to_string(negative)},
      {"--rows 0", "--rows must be at least 1, got 0"},
      {"--keys 10", "--keys 10 is below --k 2048"},
      {"--keys 100 --k 101", "--keys 100 is below --k 101"},
      {"--repeats -1", "--repeats must be at least 1, got -1"},
      {"--repeats 0", "--repeats must be at least 1"},
      {"--k 0", "--k must be in 1..8192, got 0"},
      {"--k 9000", "--k must be in 1..8192"},
      {"--heads 0", "--heads must be in 1..128"},
      {"--json /nonexistent-winnow-dir/r.jsonl", "--json /nonexistent-winnow-dir/r.jsonl: cannot write it"},
  };
  for (const Case& c : cases) {
    INFO("winnow demo " << c.args);
    const ToolRun r = run_tool("demo " + c.args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(c.message));
    CHECK_THAT(r.output, Contains("Run 'winnow demo --help'"));
  }
}

TEST_CASE("winnow demo without a GPU says so, compiles for sm_90a and prints the plan",
          "[tool]") {
  // No device visible, whatever the machine has: the no-GPU path.
  winnow::test::ScopedEnv hide("CUDA_VISIBLE_DEVICES", "-1");
  const ToolRun r = run_tool("demo --k 512");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("winnow demo: no GPU here ("));
  CHECK_THAT(r.output, Contains("Nothing is timed"));
  CHECK_THAT(r.output,
             Contains("problem  relu_mh H=64 d=128 fp8, 2048 queries x 65536 keys, k = 512"));
  CHECK_THAT(r.output, Contains("compiled for sm_90a with "));
  // The plan of the kernel just compiled: its spec (k as asked) and its tiles and bins.
  CHECK_THAT(r.output, Contains("plan:\n  spec heads=64 dim=128 "));
  CHECK_THAT(r.output, Contains(" topk=512 "));
  CHECK_THAT(r.output, Contains("\n  plan rows_per_cta="));
  CHECK_THAT(r.output, Contains(" key_tile="));
  CHECK_THAT(r.output, Contains(" bins="));
  CHECK_THAT(r.output, Contains("CPU reference, row 0 of 2 x 4096 keys, top 16:"));
  // Nothing timed, so no table and no verdict.
  CHECK(r.output.find("ms median") == std::string::npos);
  CHECK(r.output.find("fused top-k:") == std::string::npos);
}

TEST_CASE("winnow demo --no-torch takes no value", "[tool]") {
  const ToolRun r = run_tool("demo --no-torch=1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--no-torch takes no value"));
}

TEST_CASE("winnow demo on a GPU: the pipelines' table, the verdict and the same-results line",
          "[tool][gpu]") {
  WINNOW_REQUIRE_GPU();
  const std::string json = "/tmp/winnow-test-demo-" + std::to_string(::getpid()) + ".jsonl";
  std::remove(json.c_str());
  const std::string shape = "demo --rows 256 --keys 16384 --k 512 --repeats 3";
  {
    const ToolRun r = run_tool(shape + " --no-torch --json " + json);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("torch.topk: skipped (--no-torch)"));
    CHECK_THAT(r.output, Contains("pipeline                             ms median    ms min  "
                                  "extra memory\n"));
    CHECK_THAT(r.output, Contains("\nfused score + top-k (winnow)  "));
    CHECK_THAT(r.output, Contains("  workspace\n"));
    CHECK_THAT(r.output, Contains("\nscore matrix (winnow materialize)  "));
    CHECK_THAT(r.output, Contains("  scores + workspace\n"));
    CHECK(r.output.find("materialize + torch.topk  ") == std::string::npos);
    // Without torch.topk the verdict is against the score matrix alone, and says so.
    CHECK_THAT(r.output, Contains("the score matrix alone ("));
    CHECK_THAT(r.output, Contains("before any top-k over it; "));
    // At this small shape the fused op's workspace can exceed the 16 MiB of scores: the
    // verdict says which way the memory goes.
    CHECK((r.output.find(" less device memory\n") != std::string::npos ||
           r.output.find(" more device memory\n") != std::string::npos));
    CHECK_THAT(r.output, Contains("same results: yes, every fused row equals the exact top-k "
                                  "of the materialized scores bit for bit (256 rows;"));
    std::ifstream in(json);
    std::string line;
    int records = 0;
    while (std::getline(in, line)) {
      ++records;
      CHECK_THAT(line, Contains("\"workload\": \"demo-dsa\""));
    }
    CHECK(records == 2);
  }
  {
    // With torch.topk when python3 has torch with CUDA, else one line saying why not.
    const ToolRun r = run_tool(shape);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    if (r.output.find("torch.topk: skipped (") == std::string::npos) {
      CHECK_THAT(r.output, Contains("\n  then torch.topk over it  "));
      CHECK_THAT(r.output, Contains("  outputs + scratch\n"));
      CHECK_THAT(r.output, Contains("\nmaterialize + torch.topk  "));
      CHECK_THAT(r.output, Contains("than materialize + torch.topk ("));
    } else {
      CHECK_THAT(r.output, Contains("the score matrix alone ("));
    }
    CHECK_THAT(r.output, Contains("same results: yes"));
  }
  std::remove(json.c_str());
}

TEST_CASE("winnow bench names every workload, block-select and jit included", "[tool]") {
  ToolRun r = run_tool("bench");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("which workload? one of dsa-prefill,"));
  CHECK_THAT(r.output, Contains("knn-l2, knn-cosine, dsa-decode, block-select and jit"));
  r = run_tool("bench nonesuch");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("block-select and jit"));
  r = run_tool("bench --repeats 3 jit");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("jit has its own options: name it first"));
  // block-select after other options: said how to ask for it, not "unknown workload".
  r = run_tool("bench --repeats 3 block-select");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("block-select has its own options: name it first"));
}

TEST_CASE("winnow bench block-select: the steady-state warm-up is an option and is checked", "[tool]") {
  ToolRun r = run_tool("bench block-select --help");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("--warmup-ms MS") && Contains("[300]"));
  r = run_tool("bench block-select --warmup-ms -1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--warmup-ms >= 0"));
  r = run_tool("bench block-select --warmup-ms");
  CHECK(r.exit_code == 2);
}

TEST_CASE("winnow bench dsa-decode: help, argument errors, and a GPU asked for", "[tool][decode]") {
  ToolRun r = run_tool("bench dsa-decode --help");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("--mixed LIST") && Contains("63x1K+1x1M") &&
                           Contains("--graph LIST") && Contains("Needs a GPU"));
  const struct {
    const char* args;
    const char* message;
  } errors[] = {
      {"--next-n 5", "--next-n 5 is outside [1, 4]"},
      {"--k 0", "--k 0 is outside [1, 8192]"},
      {"--k 9000", "--k 9000 is outside [1, 8192]"},
      {"--len 0", "--len expects positive integers"},
      {"--mixed 63y1K", "--mixed expects COUNTxLEN parts joined by '+', got '63y1K'"},
      {"--mixed 1x2048M", "--mixed: a length above 2^30"},
      {"--graph none --mixed none --B 1 --len 1K --repeats 0", "--repeats >= 1"},
      {"--nonesuch", "unknown argument '--nonesuch'"},
  };
  for (const auto& c : errors) {
    INFO("winnow bench dsa-decode " << c.args);
    r = run_tool(std::string("bench dsa-decode ") + c.args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(c.message));
  }
  r = run_tool("bench --repeats 3 dsa-decode");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("dsa-decode has its own options: name it first"));
  if (!winnow::rt::gpu_available()) {
    r = run_tool("bench dsa-decode --B 1 --len 1K --mixed none --graph none");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("winnow bench needs a GPU"));
  }
}

TEST_CASE("winnow bench jit: a cold build into an empty folder, then a disk hit", "[tool]") {
  ToolRun r = run_tool("bench jit --kernels materialize --backends nvrtc --repeats 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("{\"workload\": \"jit\", \"impl\": \"nvrtc\", \"params\": "
                                "{\"kernel\": \"materialize\", \"score\": \"dot(0)\""));
  const size_t at = r.output.find("\"cold_s\": ");
  REQUIRE(at != std::string::npos);
  const double cold = std::stod(r.output.substr(at + 10));
  const size_t hit_at = r.output.find("\"disk_hit_s\": ");
  REQUIRE(hit_at != std::string::npos);
  const double hit = std::stod(r.output.substr(hit_at + 14));
  // A compile takes 0.1 s at least; a disk hit that compiled again would take as long.
  CHECK(cold > 0.05);
  CHECK(hit < cold / 5);
  CHECK_THAT(r.output, Contains("\"cold_s_runs\": ["));
  if (!winnow::rt::gpu_available()) CHECK_THAT(r.output, Contains("\"execute_host_us\": null"));
  r = run_tool("bench jit --kernels nonesuch");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("unknown kernel 'nonesuch'; the kernels are relu_mh, softplus"));
  r = run_tool("bench jit --backends gcc");
  CHECK(r.exit_code == 2);
}

TEST_CASE("winnow compile: messages name the op, quote the user's text, list the archs",
          "[tool]") {
  ToolRun r = run_tool("compile --op block-attention --dim 96 --arch sm_90a --emit ir");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("head_dim = 96 is not supported: block-attention takes 64 or 128"));
  r = run_tool("compile --op block-select --dim 96 --arch sm_90a --emit ir");
  CHECK_THAT(r.output, Contains("block-select takes 64 or 128"));
  r = run_tool("compile --expr 1 --arch sm_90a --emit ir");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("program '1' reads no dot product"));
  r = run_tool("compile --score relu_mh --arch sm_90 --emit ir");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("arch sm_90 is not supported: winnow supports sm_90a ("));
  r = run_tool("compile --score relu_mh --arch sm_90a --emit ir");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("head_sums=true wgmma=true"));
}

TEST_CASE("winnow compile --timings prints NVRTC's time per phase", "[tool]") {
  const std::string out = "/tmp/winnow-test-timings-" + std::to_string(::getpid()) + ".ptx";
  ToolRun r = run_tool("compile --score ip --dim 64 --arch sm_90a --emit ptx --timings -o " + out);
  std::remove(out.c_str());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("CUDA C++ Frontend"));
  CHECK_THAT(r.output, Contains("NVVM Optimizer"));
  CHECK_THAT(r.output, Contains("PTX Translation"));
  r = run_tool("compile --score ip --dim 64 --arch sm_90a --emit ir --timings");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--timings is for --emit ptx or cubin"));
  // Without the flag, no table.
  r = run_tool("compile --score ip --dim 64 --arch sm_90a --emit ptx -o " + out);
  std::remove(out.c_str());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("NVVM Optimizer") == std::string::npos);
}

TEST_CASE("WINNOW_LOG_LEVEL: info says what was compiled, debug also the key, warn neither",
          "[tool]") {
  {
    winnow::test::ScopedEnv level("WINNOW_LOG_LEVEL", "info");
    const ToolRun r = run_tool("demo --rows 2 --keys 4096 --no-torch");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("winnow: info: compiled winnow_topk for sm_90a"));
    CHECK(r.output.find("winnow: debug:") == std::string::npos);
  }
  {
    winnow::test::ScopedEnv level("WINNOW_LOG_LEVEL", "debug");
    const ToolRun r = run_tool("demo --rows 2 --keys 4096 --no-torch");
    CHECK_THAT(r.output, Contains("winnow: debug: winnow_topk key "));
  }
  {
    winnow::test::ScopedEnv level("WINNOW_LOG_LEVEL", "warn");
    const ToolRun r = run_tool("demo --rows 2 --keys 4096 --no-torch");
    CHECK(r.output.find("winnow: info:") == std::string::npos);
  }
}

TEST_CASE("winnow bench --shards: bad values, other workloads, and too few GPUs", "[tool][shard]") {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"knn-ip --shards 0", "--shards 0 is outside 1..1024"},
      {"knn-ip --shards 2000", "--shards 2000 is outside 1..1024"},
      {"knn-ip --shards two", "--shards"},
      {"knn-l2 --shards 2", "--shards is for knn-ip and dsa-prefill, not knn-l2"},
      {"knn-l2 --shards 1", "--shards is for knn-ip and dsa-prefill, not knn-l2"},
      {"knn-ip --shards 2 --compile-only", "--compile-only builds one GPU's kernels: not with --shards"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const ToolRun r = run_tool(std::string("bench ") + c.args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(c.message));
  }
  int count = 0;
  if (winnow::rt::gpu_available()) winnow::rt::driver().cuDeviceGetCount(&count);
  const int n = count < 1 ? 2 : count + 1;  // more than there are, and above 1
  for (const char* workload : {"knn-ip", "dsa-prefill"}) {
    INFO(workload);
    const ToolRun r = run_tool(fmt::format("bench {} --shards {}", workload, n));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(fmt::format("--shards {} needs {} GPUs, found {}", n, n, count)));
  }
}

// --compile-only builds the run's kernels into the cache with no GPU; the same problems
// built again (as a GPU run of the same arguments would) are cache hits with the same keys.
TEST_CASE("winnow bench --compile-only fills the kernel cache with the run's kernels", "[tool]") {
  winnow::test::TempDir dir;
  winnow::test::ScopedEnv cache("WINNOW_CACHE_DIR", dir.path.c_str());
  ToolRun r = run_tool("bench knn-ip --T 4096 --k 16,64 --d 128 --compile-only");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("N=4096 materialize: "));
  CHECK_THAT(r.output, Contains("N=4096 k=16: "));
  CHECK_THAT(r.output, Contains("N=4096 k=64: "));
  const ToolRun again = run_tool("bench knn-ip --T 4096 --k 16,64 --d 128 --compile-only");
  REQUIRE(again.exit_code == 0);
  // The same kernels and keys, printed in the same order ("  N=4096 k=16: <key> (0.1 s)").
  auto keys = [](const std::string& text) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("  N=", 0) == 0) out += line.substr(0, line.find(" (")) + "\n";
    return out;
  };
  const std::string first = keys(r.output);
  CHECK(std::count(first.begin(), first.end(), '\n') == 3);
  CHECK(keys(again.output) == first);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) > 0);
}

// dsa-decode --compile-only builds each shape's kernels with no GPU; a second run of the
// same shapes adds nothing to the cache (every kernel a hit), another k adds its kernels.
TEST_CASE("winnow bench dsa-decode --compile-only fills the kernel cache", "[tool]") {
  winnow::test::TempDir dir;
  winnow::test::ScopedEnv cache("WINNOW_CACHE_DIR", dir.path.c_str());
  auto files = [&] {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path)) n += e.is_regular_file();
    return n;
  };
  const std::string shapes = "bench dsa-decode --B 2 --len 4K,64K --mixed none --graph 1x128 --compile-only";
  ToolRun r = run_tool(shapes);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("  2x4096: stream path"));
  CHECK_THAT(r.output, Contains("  2x65536: stream path"));  // with fallback rounds
  CHECK_THAT(r.output, Contains("  graph 1x128: stream path"));
  const size_t first = files();
  CHECK(first >= 2);  // the stream kernel and the materialize baseline
  REQUIRE(run_tool(shapes).exit_code == 0);
  CHECK(files() == first);
  REQUIRE(run_tool(shapes + " --k 1024").exit_code == 0);
  CHECK(files() > first);
}

// A run recorded (WINNOW_RECORD_COMPILES) and replayed into another cache: the replay
// builds the same kernels under the same keys (the same backend here); a file that is not
// a record is reported and fails the replay. The run sets WINNOW_NVRTC_OPTIONS, which is
// in the key twice (the options, and the cache-relevant environment) and the replay does
// not: the record carries the environment (session 30's llvm suite missed a case's
// kernels without it).
TEST_CASE("winnow cache replay builds a recorded run's kernels under the same keys", "[tool][cache]") {
  winnow::test::TempDir rec, first, second;
  std::string keys;
  {
    winnow::test::ScopedEnv record("WINNOW_RECORD_COMPILES", rec.path.c_str());
    winnow::test::ScopedEnv options("WINNOW_NVRTC_OPTIONS", "-DWINNOW_RECORDED_OPTION=1");
    winnow::test::ScopedEnv cache("WINNOW_CACHE_DIR", first.path.c_str());
    const ToolRun r = run_tool("bench knn-ip --T 4096 --k 16 --d 128 --compile-only");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    keys = r.output;
  }
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(rec.path)) files += e.path().extension() == ".compile";
  CHECK(files == 2);
  ToolRun r = run_tool("cache replay '" + rec.path.string() + "' --dir '" + second.path.string() + "' --backend nvrtc");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("replaying 2 requests with nvrtc"));
  // Every key the run printed ("N=4096 k=16: <16 hex>") is one the replay built.
  for (const char* what : {"N=4096 materialize: ", "N=4096 k=16: "}) {
    const size_t at = keys.find(what);
    REQUIRE(at != std::string::npos);
    CHECK_THAT(r.output, Contains(keys.substr(at + std::strlen(what), 16)));
  }
  std::ofstream(rec.path / "bad.compile") << "not a record\n";
  r = run_tool("cache replay '" + rec.path.string() + "' --dir '" + second.path.string() + "'");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("not a winnow compile record"));
  CHECK(run_tool("cache replay").exit_code == 2);
  CHECK(run_tool("cache ls --backend llvm").exit_code == 2);
}
