// The paged decode op's stream path (ops/paged/paged_stream.h; WINNOW_PAGED_STREAM=1): the choice
// and its refusals [decode], the module through NVRTC with no GPU (wgmma m64n64 e4m3, TMA,
// no spills) [nvrtc], and the device against the CPU reference, graph replay included
// [gpu] (skipped visibly without a GPU). The kernels' CPU emulation:
// tests/test_paged_stream_emulated.cpp.
#include <algorithm>
#include <cmath>
#include <random>
#include <regex>

#include "compiler/backend/backend.h"
#include "compiler/codegen/emit_paged.h"
#include "ops/common/jit_module.h"
#include "ops/paged/paged_stream.h"
#include "ops/paged/paged_topk.h"
#include "paged_support.h"
#include "ptx_entries.h"
#include "ptxas_log.h"
#include "support.h"
#include "testing/paged_harness.h"
#include "testing/paged_reference.h"
#include "tool_run.h"

using namespace winnow;
using test::decode_problem;

TEST_CASE("paged decode stream path: the default where it can run, WINNOW_PAGED_STREAM=0 leaves it",
          "[decode]") {
  auto p = decode_problem(64, 2048, 2, 8, 16);
  {
    test::ScopedEnv unset("WINNOW_PAGED_STREAM", nullptr);
    CHECK(ops::PagedTopkOp::create(p, nullptr)->stream());
    // Problems it cannot run keep the gathered path without a word.
    CHECK_FALSE(ops::PagedTopkOp::create(decode_problem(32, 2048, 2, 8, 16), nullptr)->stream());
    auto q = p;
    q.arch = backend::parse_arch("sm_100a");
    CHECK_FALSE(ops::PagedTopkOp::create(q, nullptr)->stream());
  }
  {
    test::ScopedEnv on("WINNOW_PAGED_STREAM", "1");
    auto op = ops::PagedTopkOp::create(p, nullptr);
    CHECK(op->stream());
    CHECK(op->problem().stream);
    CHECK_THAT(op->stream_source(), Catch::Contains("winnow_paged_stream"));
    CHECK_THROWS_AS(op->topk(), ops::NotSupported);
  }
  {
    test::ScopedEnv zero("WINNOW_PAGED_STREAM", "0");
    CHECK_FALSE(ops::PagedTopkOp::create(p, nullptr)->stream());
    p.stream = true;  // the problem's choice stands
    CHECK(ops::PagedTopkOp::create(p, nullptr)->stream());
  }
  {
    // The switch leaves the problems the path cannot run on the default path.
    test::ScopedEnv on("WINNOW_PAGED_STREAM", "1");
    CHECK_FALSE(ops::PagedTopkOp::create(decode_problem(32, 2048, 2, 8, 16), nullptr)->stream());
  }
  test::ScopedEnv bad("WINNOW_PAGED_STREAM", "yes");
  p.stream = false;
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("expected 0 or 1"));
}

TEST_CASE("paged decode stream path: two CTAs an SM of two pages a warpgroup",
          "[decode]") {
  auto bounds = [](const ops::PagedStream& s) {
    const std::string& src = s.source();
    const std::string key = "__launch_bounds__(winnow::kPagedStreamThreads, ";
    const size_t at = src.find(key);
    return at == std::string::npos ? -1 : src[at + key.size()] - '0';
  };
  {
    CHECK(bounds(ops::PagedStream(decode_problem(64, 2048, 1, 8, 16), nullptr)) == 2);
    CHECK(bounds(ops::PagedStream(decode_problem(64, 2048, 2, 8, 16), nullptr)) == 2);
    CHECK(bounds(ops::PagedStream(decode_problem(64, 2048, 4, 8, 16), nullptr)) == 2);
    const ops::PagedStream s(decode_problem(64, 2048, 1, 8, 16), nullptr);
    CHECK_THAT(s.source(), Catch::Contains("kStages = 2, kNextN = 1"));
  }
}

TEST_CASE("paged decode: the fallback rounds' gate compiles by NVRTC alone for sm_90a and sm_100a",
          "[nvrtc]") {
  // cudaGraphSetConditional, a runtime builtin: a call the driver resolves when it loads the
  // module, with no relocatable code or device runtime library to link.
  const char* arch = GENERATE("sm_90a", "sm_100a");
  INFO(arch);
  const backend::CompileResult r = backend::make_nvrtc_backend()->compile(
      ops::make_compile_request(codegen::emit_paged_round_gate(), backend::parse_arch(arch),
                                codegen::kPagedRoundGateEntry),
      /*emit_ptx=*/true);
  CHECK(std::string(r.cubin.data() + 1, 3) == "ELF");
  CHECK(r.ptx.find("cudaGraphSetConditional") != std::string::npos);
  CHECK(r.ptx.find(codegen::kPagedRoundGateEntry) != std::string::npos);
}

TEST_CASE("paged decode stream path: the sample's rank and visible keys in integer arithmetic",
          "[decode]") {
  std::mt19937_64 rng(test::test_seed() ^ 0x5a3bu);
  auto draw = [&](long long lo, long long hi) {
    return std::uniform_int_distribution<long long>(lo, hi)(rng);
  };
  for (int t = 0; t < 20000; ++t) {
    const u32 x = t < 64 ? u32(t) : t < 128 ? (1u << 28) - u32(t - 64) : u32(draw(0, 1 << 28));
    const u32 r = floor_sqrt(x);
    INFO("x " << x);
    REQUIRE(uint64_t(r) * r <= x);
    REQUIRE((uint64_t(r) + 1) * (uint64_t(r) + 1) > x);
  }
  for (int t = 0; t < 3000; ++t) {
    const int k = int(draw(1, 8192)), capacity = knn_capacity(k);
    const int pages = int(draw(1, (1 << 25) - 1)), v = int(draw(capacity + 1, int64_t(pages) * 64));
    const int n = int(std::min<int64_t>(int64_t(pages) * 64, INT32_MAX));
    const int s = paged_sample_pages(n, pages, k, capacity);
    if (s == 0) continue;
    int valid = 0;
    for (int i = 0; i < s; ++i) {
      const int64_t left = int64_t(v) - int64_t(int64_t(i) * pages / s) * 64;
      const int got = paged_sample_page_valid(i, s, pages, v);
      REQUIRE(got == int(std::clamp<int64_t>(left, 0, 64)));
      valid += got;
    }
    if (valid == 0) continue;
    const int rank = paged_sample_rank(k, capacity, valid, v);
    const double want = std::sqrt(double(k) * capacity) * valid / v;
    INFO("k " << k << " valid " << valid << " v " << v);
    REQUIRE(rank >= 1);
    REQUIRE(rank <= valid);
    REQUIRE(std::abs(rank - std::clamp(want, 1.0, double(valid))) <= 1.0);
  }
}

TEST_CASE("paged decode stream path: other heads and archs and scores are refused with messages",
          "[decode]") {
  auto p = decode_problem(32, 2048, 1, 8, 16);
  p.stream = true;
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("32 heads"));
  p = decode_problem(64, 2048, 1, 8, 16);
  p.stream = true;
  p.arch = backend::parse_arch("sm_100a");
  CHECK_THROWS_AS(ops::PagedTopkOp::create(p, nullptr), ops::NotSupported);
  p.arch = backend::parse_arch("sm_90a");
  p.score = ir::parse("max_h(dot(h))");
  p.expression = "max_h(dot(h))";
  CHECK_THROWS_WITH(ops::PagedTopkOp::create(p, nullptr), Catch::Contains("head-sum program"));
  p.score = nullptr;
  CHECK_NOTHROW(ops::PagedTopkOp::create(p, nullptr));
}

TEST_CASE("paged decode stream path compiles for sm_90a: wgmma m64n64 e4m3 and TMA with no spills",
          "[nvrtc][decode]") {
  auto be = backend::make_nvrtc_backend();
  struct Case {
    int next_n, k;
    bool sorted;
  };
  for (const Case c : {Case{1, 2048, false}, Case{4, 8192, true}, Case{2, 1, false}}) {
    INFO("next_n " << c.next_n << " k " << c.k);
    auto p = decode_problem(64, c.k, c.next_n, 128, 1024);
    p.sorted = c.sorted;
    ops::PagedStream s(p, nullptr);
    // The stub's functor is the one the emulation runs (test_paged_stream_emulated.cpp).
    CHECK_THAT(s.source(), Catch::Contains("return winnow::op_mul(w, winnow::op_relu(dot));"));
    CHECK_THAT(s.source(), Catch::Contains("post(float hsum, const winnow::ScoreArgs& a) { return "
                                           "winnow::op_mul(hsum, a.kscale); }"));
    backend::CompileRequest req = s.compile_request();
    req.options.push_back("--ptxas-options=-v");
    const backend::CompileResult r = be->compile(req, /*emit_ptx=*/true);
    CHECK(std::string(r.cubin.data() + 1, 3) == "ELF");
    CHECK(r.ptx.find("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3") != std::string::npos);
    CHECK(r.ptx.find("cp.async.bulk.tensor.2d") != std::string::npos);
    CHECK(r.ptx.find("griddepcontrol.wait") != std::string::npos);
    // Every kernel lets the next launch start first thing (grid_dependency_trigger).
    for (const char* entry : {"winnow_paged_prepare", "winnow_paged_stream",
                              "winnow_paged_threshold", "winnow_paged_hint", "winnow_paged_select"}) {
      INFO(entry);
      const std::string text = test::ptx_entry_text(r.ptx, entry);
      CHECK(!text.empty());
      CHECK(text.find("griddepcontrol.launch_dependents") != std::string::npos);
    }
    INFO(r.log);
    const std::vector<test::PtxasSpills> spills = test::ptxas_spills(r.log);
    for (const test::PtxasSpills& e : spills) {
      CHECK(e.stores == 0);
      CHECK(e.loads == 0);
    }
    CHECK(spills.size() == 5);
    // No static shared memory in the kernels with dynamic shared memory (the per-row ones
    // take all of the opt-in size: a static word beside it fails the launch; ptxas prints
    // "bytes smem" only where there is some), the prepare kernel's scans aside.
    for (const char* entry : {"winnow_paged_select", "winnow_paged_threshold", "winnow_paged_hint",
                              "winnow_paged_stream"}) {
      const size_t at = r.log.find(std::string("entry function '") + entry + "'");
      REQUIRE(at != std::string::npos);
      const size_t next = r.log.find("entry function '", at + 1);
      CHECK(r.log.substr(at, next == std::string::npos ? std::string::npos : next - at).find("bytes smem") ==
            std::string::npos);
    }
    // No local memory either (a struct copy indexed at run time once put 48 bytes there).
    const std::regex stack("([0-9]+) bytes stack frame");
    for (auto it = std::sregex_iterator(r.log.begin(), r.log.end(), stack);
         it != std::sregex_iterator(); ++it)
      CHECK(std::stoi((*it)[1]) == 0);
  }
  // Through the op and the kernel cache, as the C API builds it.
  auto p = decode_problem(64, 2048, 2, 64, 1024);
  p.stream = true;
  auto op = ops::PagedTopkOp::create(p, nullptr);
  rt::CubinCache cache(std::nullopt);
  op->build(cache, *be);
  REQUIRE(op->built());
  CHECK(std::string(op->stream_cubin().data() + 1, 3) == "ELF");
  CHECK_THROWS_AS(op->workspace_bytes(), ops::NotBuilt);  // no device: not loaded
}

TEST_CASE("winnow compile --op paged-stream prints the stream path module and refuses what it "
          "cannot run",
          "[tool][decode]") {
  test::ToolRun r = test::run_tool("compile --op paged-stream --next-n 2 --k 512 --arch sm_90a --emit cu");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("kNextN = 2, kTopK = 512"));
  CHECK_THAT(r.output, Catch::Contains("winnow_paged_select"));
  r = test::run_tool("compile --op paged-stream --arch sm_90a --emit ir --sorted");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("paged stream next_n=1 k=2048 sorted=true"));
  r = test::run_tool("compile --op paged-stream --heads 32 --arch sm_90a --emit cu");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("32 heads"));
  r = test::run_tool("compile --op paged-stream --arch sm_100a --emit cu");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("sm_90a"));
  r = test::run_tool("compile --op paged-stream --next-n 5 --arch sm_90a --emit cu");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("next_n = 5"));
}

namespace {

ops::PagedProblem stream_problem(int k, int next_n, int max_batch, int max_blocks) {
  ops::PagedProblem p = decode_problem(64, k, next_n, max_batch, max_blocks);
  p.stream = true;
  return p;
}

}  // namespace

TEST_CASE("paged decode stream path equals the reference: edge lengths at next_n 1 to 4 and k 1 and 2048",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  const int next_n = GENERATE(1, 2, 3, 4);
  const int k = GENERATE(1, 2048);
  INFO("next_n " << next_n << " k " << k);
  const auto p = stream_problem(k, next_n, 12, 160);
  test::check_paged_on_gpu(p, {0, 1, 2, 63, 64, 65, k - 1, k, k + 1, 3000, 8193, 10239});
  ops::PagedDataOptions ties;
  ties.levels = 2;
  test::check_paged_on_gpu(p, {0, 1, 63, k, k + 1, 8193, 9000, 10239}, ties);
}

TEST_CASE("paged decode stream path equals the reference: plans of 2, 3 and 19 launches, k = 8192 sorted",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  // The plan's longest window decides the launches (ops::paged_stream_steps): within k
  // (unsorted) nothing is scored; within the list (capacity 8192 at k = 2048) no sample and
  // no fallback round; past it, all of them.
  struct Case {
    int k, max_blocks;
    bool sorted;
    size_t launches;
    std::vector<int> lens;
  };
  const int full = 3 + 2 * (kKnnRadixRounds + 1);
  const Case c = GENERATE_COPY(Case{2048, 32, false, 2, {0, 1, 64, 2047, 2048}},
                               Case{2048, 128, false, 3, {0, 1, 2047, 2048, 2049, 5000, 8191, 8192}},
                               Case{2048, 128, true, 3, {0, 1, 2048, 8192, 100}},
                               Case{8192, 600, true, size_t(full), {0, 100, 8191, 8193, 20000, 38400}});
  INFO("k " << c.k << " max_blocks " << c.max_blocks << " sorted " << c.sorted);
  auto p = stream_problem(c.k, 1, 8, c.max_blocks);
  p.sorted = c.sorted;
  REQUIRE(ops::paged_stream_steps(p).size() == c.launches);
  test::check_paged_on_gpu(p, c.lens);
  ops::PagedDataOptions ties;
  ties.levels = 2;
  test::check_paged_on_gpu(p, c.lens, ties);
}

TEST_CASE("paged decode stream path equals the reference: random and mixed lengths with ties and "
          "NaN and B x next_n lengths and sorted rows",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  std::mt19937_64 rng(test::test_seed());
  const int next_n = GENERATE(1, 2, 4);
  INFO("next_n " << next_n);
  auto p = stream_problem(2048, next_n, 16, 256);
  const int max_len = int(test::sized(16384, 12000));  // half the windows above the capacity
  test::check_paged_on_gpu(p, test::random_lens(16, max_len, rng));
  ops::PagedDataOptions ties;
  ties.levels = 3;
  test::check_paged_on_gpu(p, test::random_lens(16, max_len, rng), ties);
  ops::PagedDataOptions nan;
  nan.nan_fraction = 0.01;
  test::check_paged_on_gpu(p, test::random_lens(16, max_len, rng), nan);
  ops::PagedDataOptions per;
  per.lens_per_query = true;
  test::check_paged_on_gpu(p, test::random_lens(16, max_len, rng), per);
  // One long request among short ones (the mixed batch's shape), sorted output.
  p.sorted = true;
  test::check_paged_on_gpu(p, {max_len, 1000, 0, 64, 3000, 2048, 100, 5000});
}

TEST_CASE("paged decode stream path: a graph captured at the batch replays smaller lengths as "
          "eager runs them",
          "[gpu][decode]") {
  WINNOW_REQUIRE_GPU();
  auto& f = test::GpuFixture::get();
  auto p = stream_problem(2048, 2, 8, 256);
  p.arch = ops::device_arch(*f.ctx);
  std::mt19937_64 rng(test::test_seed());
  const int max_len = int(test::sized(16384, 9000));
  const std::vector<int> lens(8, max_len);
  ops::PagedHostData d = ops::random_paged_data(p, lens, rng);
  auto op = ops::PagedTopkOp::create(p, f.ctx.get());
  op->build(*f.cache, *f.be);
  // Smaller lengths (some 0, some within k, some long), each within the captured ones.
  std::vector<int> smaller = test::random_lens(8, max_len, rng);
  smaller[0] = 0;
  smaller[1] = 100;
  const ops::PagedGraphResult r = ops::run_paged_graph_on_device(*op, *f.ctx, d, smaller);
  CHECK(test::paged_wrong_rows(p, d, r.captured.indices) == 0);
  CHECK(r.replayed.indices == r.eager.indices);
  d.context_lens = smaller;
  CHECK(test::paged_wrong_rows(p, d, r.replayed.indices) == 0);
  CHECK(r.replayed.bad_windows == 0);
}
