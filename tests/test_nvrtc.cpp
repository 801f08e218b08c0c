// The NVRTC backend and arch parsing: run on machines with no GPU.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/common/topk_op.h"
#include "tests/cubin_sections.h"
#include "tests/support.h"

using namespace winnow::backend;

namespace {

const char* kHeader = R"(
#pragma once
__device__ inline float winnow_test_scale(float x) { return 2.0f * x + WINNOW_TEST_BIAS; }
)";

const char* kSource = R"(
#include "winnow_test/scale.cuh"
extern "C" __global__ void winnow_test_kernel(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = winnow_test_scale(static_cast<float>(i));
}
)";

CompileRequest small_request(const std::string& arch) {
  CompileRequest req;
  req.source = kSource;
  req.source_name = "winnow_test_kernel.cu";
  req.headers = {{"winnow_test/scale.cuh", kHeader}};
  req.arch = parse_arch(arch);
  req.options = {"-DWINNOW_TEST_BIAS=1.0f"};  // proves req.options reach NVRTC
  return req;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The op's module compiled with no options from the environment: its cubin's sections.
template <class Op>
auto sections_of(const Backend& backend, const Op& op) {
  CompileRequest req = op.compile_request();
  req.options.clear();  // not WINNOW_NVRTC_OPTIONS of the environment
  return winnow::test::cubin_sections(backend.compile(req).cubin);
}

}  // namespace

TEST_CASE("nvrtc backend names itself and its exact version", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  CHECK(backend->name() == "nvrtc");
  // The exact "major.minor" of the loaded NVRTC: it goes into every cache key.
  CHECK_THAT(backend->version(), Catch::Matches("[0-9]+\\.[0-9]+"));
}

TEST_CASE("nvrtc compiles a kernel with an in-memory header to a cubin", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    INFO("arch " << arch);
    CompileResult r = backend->compile(small_request(arch));
    REQUIRE(r.cubin.size() > 1000);
    CHECK(r.cubin[0] == 0x7f);
    CHECK(r.cubin[1] == 'E');
    CHECK(r.cubin[2] == 'L');
    CHECK(r.cubin[3] == 'F');
    // ELF e_machine (bytes 18-19, little-endian) is EM_CUDA = 190: SASS, not PTX text.
    CHECK(static_cast<unsigned char>(r.cubin[18]) == 190);
    CHECK(r.ptx.empty());
  }
}

TEST_CASE("nvrtc emits PTX on request", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  CompileResult r = backend->compile(small_request("sm_90a"), /*emit_ptx=*/true);
  CHECK(r.ptx.find(".target sm_90a") != std::string::npos);
  CHECK(r.ptx.find("winnow_test_kernel") != std::string::npos);
  CHECK(!r.cubin.empty());
}

TEST_CASE("a compile error carries the log and the dumped source", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  CompileRequest req = small_request("sm_90a");
  req.source = std::string(kSource) + "\nthis is not C++ ;\n";

  SECTION("into the requested dump folder") {
    winnow::test::TempDir dump;
    req.dump_dir = dump.path.string();
    try {
      backend->compile(req);
      FAIL("compile succeeded");
    } catch (const CompileError& e) {
      std::string what = e.what();
      CHECK(what.find("NVRTC failed to compile winnow_test_kernel.cu for sm_90a:") !=
            std::string::npos);
      REQUIRE(!e.log().empty());
      CHECK(what.find(e.log()) != std::string::npos);
      CHECK(e.log().find("error") != std::string::npos);
      CHECK(what.find("generated source written to " + e.source_path()) != std::string::npos);
      REQUIRE(std::filesystem::exists(e.source_path()));
      CHECK(read_all(e.source_path()) == req.source);
      CHECK(std::filesystem::path(e.source_path()).parent_path() == dump.path);
      CHECK(read_all(dump.path / "include" / "winnow_test" / "scale.cuh") == kHeader);
    }
  }
  SECTION("into a fresh temporary folder") {
    try {
      backend->compile(req);
      FAIL("compile succeeded");
    } catch (const CompileError& e) {
      std::filesystem::path src = e.source_path();
      REQUIRE(std::filesystem::exists(src));
      CHECK(read_all(src) == req.source);
      CHECK(src.parent_path().filename().string().rfind("winnow-failed-", 0) == 0);
      std::error_code ec;
      std::filesystem::remove_all(src.parent_path(), ec);
    }
  }
}

TEST_CASE("a bad option is a compile error, not a crash", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  CompileRequest req = small_request("sm_90a");
  winnow::test::TempDir dump;
  req.dump_dir = dump.path.string();
  req.options.push_back("--no-such-option");
  CHECK_THROWS_AS(backend->compile(req), CompileError);
}

// -lineinfo left the default options because it changes no instruction: this holds the
// claim to the generated kernels (the SASS of each entry, byte for byte) and checks that the
// default cubin carries no line table while the option still reaches NVRTC.
TEST_CASE("nvrtc: line info only when asked, and it changes no instruction", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  winnow::ops::TopkProblem p;
  p.arch = parse_arch("sm_90a");
  p.k = 256;
  SECTION("ip fp32 materialize") {
    p.score = winnow::ir::ip();
    p.q_dtype = p.k_dtype = winnow::ops::DType::F32;
    p.mode = winnow::ops::Mode::Materialize;
  }
  SECTION("relu_mh fp8 top-k (wgmma)") {
    p.score = winnow::ir::relu_mh(true);
    p.heads = 64;
    p.q_dtype = p.k_dtype = winnow::ops::DType::E4M3;
  }
  CompileRequest req = winnow::ops::TopkOp::create(p, nullptr)->compile_request();
  req.options.clear();  // not WINNOW_NVRTC_OPTIONS of the environment
  const auto plain = winnow::test::cubin_sections(backend->compile(req).cubin);
  req.options.push_back("-lineinfo");
  const auto lines = winnow::test::cubin_sections(backend->compile(req).cubin);
  CHECK(plain.count(".nv_debug_line_sass") == 0);
  CHECK(lines.count(".nv_debug_line_sass") == 1);
  REQUIRE(plain.count(".text.winnow_topk") == 1);
  for (const auto& [name, bytes] : plain) {
    if (name.rfind(".text.", 0) != 0) continue;
    INFO(name);
    REQUIRE(lines.count(name) == 1);
    CHECK(bytes == lines.at(name));
  }
}

TEST_CASE("nvrtc: the pipelined wgmma form compiles for sm_90a (one CTA per SM)", "[nvrtc]") {
  auto backend = make_nvrtc_backend();
  winnow::ops::TopkProblem p;
  p.arch = parse_arch("sm_90a");
  p.score = winnow::ir::relu_mh(true);
  p.heads = 64;
  p.q_dtype = p.k_dtype = winnow::ops::DType::E4M3;
  p.k = 512;
  p.mode = GENERATE(winnow::ops::Mode::TopK, winnow::ops::Mode::Materialize);
  const auto plain = winnow::ops::TopkOp::create(p, nullptr);
  CHECK_FALSE(plain->kernel_plan().pipelined);  // opt-in
  CHECK(plain->source().find("__launch_bounds__(288, 2)") != std::string::npos);
  p.plan_knobs.pipeline = 1;
  const auto op = winnow::ops::TopkOp::create(p, nullptr);
  REQUIRE(op->kernel_plan().pipelined);
  CHECK(op->kernel_plan().threads == 384);
  CHECK(op->kernel_plan().math_threads() == 256);
  CHECK(op->source().find("static constexpr bool kPipelined = true;") != std::string::npos);
  CHECK(op->source().find("__launch_bounds__(384, 1)") != std::string::npos);
  CHECK(sections_of(*backend, *op).count(".text.winnow_topk") == 1);
  // Not on the CUDA-core or mma.sync paths, nor for sm_100a (no wgmma there).
  p.arch = parse_arch("sm_100a");
  CHECK_FALSE(winnow::ops::TopkOp::create(p, nullptr)->kernel_plan().pipelined);
}

TEST_CASE("parse_arch accepts sm_<major><minor> with an optional a or f suffix only", "[nvrtc]") {
  CHECK(parse_arch("sm_90a") == Arch{9, 0, 'a'});
  CHECK(parse_arch("sm_90") == Arch{9, 0, 0});
  CHECK(parse_arch("sm_100a") == Arch{10, 0, 'a'});
  CHECK(parse_arch("sm_100f") == Arch{10, 0, 'f'});
  CHECK(parse_arch("sm_120") == Arch{12, 0, 0});
  CHECK(parse_arch("sm_90a").str() == "sm_90a");
  CHECK(parse_arch("sm_100f").compute_str() == "compute_100f");
  CHECK(parse_arch("sm_90").str() == "sm_90");
  for (const char* bad : {"90a", "", "sm_", "sm_9", "sm_90x", "sm_90aa", "compute_90a", "SM_90a",
                          "sm_090", "sm_1000", "sm_9a0", " sm_90a"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(parse_arch(bad), std::invalid_argument);
  }
  try {
    parse_arch("90a");
    FAIL("accepted 90a");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("sm_<major><minor>[a|f]") != std::string::npos);
  }
}
