// The LLVM backend on the CPU: loading it by name, LLVM IR, PTX and cubins (nvJitLink) of a
// small kernel and of the real generated kernels, its errors, and that the backend is part
// of the cache key. Built without LLVM (WINNOW_LLVM_BUILT undefined), the loader's refusal
// is checked instead.
#include <algorithm>
#include <regex>
#include <string>

#include "compiler/backend/backend.h"
#include "compiler/codegen/embedded_templates.h"
#include "compiler/ir/ir.h"
#include "ops/common/backend_choice.h"
#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "ops/common/errors.h"
#include "ops/common/jit_module.h"
#include "ops/common/topk_op.h"
#include "runtime/kernel_cache.h"
#include "support.h"
#include "topk_check.h"

using namespace winnow;
using backend::CompileError;
using backend::CompileRequest;
using backend::CompileResult;

namespace {

const char* kSource = R"(
extern "C" __global__ void winnow_test_kernel(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * static_cast<float>(i) + WINNOW_TEST_BIAS;
}
)";

CompileRequest small_request() {
  CompileRequest req;
  req.source = kSource;
  req.source_name = "winnow_test_kernel.cu";
  req.arch = backend::parse_arch("sm_90a");
  req.options = {"-DWINNOW_TEST_BIAS=3.5f"};  // -D reaches clang
  return req;
}

bool is_cuda_elf(const std::vector<char>& cubin) {
  return cubin.size() > 1000 && cubin[0] == 0x7f && cubin[1] == 'E' && cubin[2] == 'L' &&
         cubin[3] == 'F' && (static_cast<unsigned char>(cubin[18]) | (cubin[19] << 8)) == 190;
}

bool contains(const std::vector<char>& bytes, const std::string& s) {
  return std::search(bytes.begin(), bytes.end(), s.begin(), s.end()) != bytes.end();
}

// The .entry line and its .param declarations: what the launch code relies on.
std::string entry_params(const std::string& ptx, const std::string& entry) {
  const size_t at = ptx.find(".entry " + entry + "(");
  if (at == std::string::npos) return "";
  const size_t end = ptx.find(')', at);
  std::string text = ptx.substr(at, end - at);
  text = std::regex_replace(text, std::regex("[ \t\n]+"), " ");
  return text;
}

}  // namespace

#ifdef WINNOW_LLVM_BUILT

TEST_CASE("llvm backend loads by name and states its exact versions", "[llvm]") {
  auto be = backend::make_backend("llvm");
  CHECK(be->name() == "llvm");
  CHECK_THAT(be->version(), Catch::Matches("clang 19\\.[0-9]+\\.[0-9]+ nvJitLink [0-9]+\\.[0-9]+"));
  CHECK_NOTHROW(be->load());  // the module beside the binary (tests/support.h's skip asks it)
  CHECK_THROWS_WITH(backend::make_backend("gcc"), Catch::Contains("nvrtc or llvm"));
}

TEST_CASE("llvm backend: LLVM IR, PTX and an sm_90a cubin of a small kernel", "[llvm]") {
  auto be = backend::make_backend("llvm");
  const std::string ir = be->llvm_ir(small_request());
  CHECK_THAT(ir, Catch::Contains("target triple = \"nvptx64-nvidia-cuda\""));
  CHECK_THAT(ir, Catch::Contains("define ptx_kernel void @winnow_test_kernel") ||
                     Catch::Contains("define dso_local void @winnow_test_kernel"));
  CHECK_THAT(ir, Catch::Contains("3.500000e+00"));  // the -D value
  CHECK_THAT(ir, !Catch::Contains("contract"));      // -ffp-contract=off: no fusion flags

  const CompileResult r = be->compile(small_request(), /*emit_ptx=*/true);
  CHECK_THAT(r.ptx, Catch::Contains(".target sm_90a"));
  CHECK_THAT(r.ptx, Catch::Contains(".entry winnow_test_kernel("));
  CHECK_THAT(r.ptx, !Catch::Contains("fma.rn.f32"));  // 2 i + 3.5 stays a mul and an add
  CHECK_THAT(r.ptx, Catch::Contains("0f40600000"));   // 3.5f
  REQUIRE(is_cuda_elf(r.cubin));
  CHECK(contains(r.cubin, "winnow_test_kernel"));
  REQUIRE(r.phase_ms.size() == 4);
  for (const auto& [phase, ms] : r.phase_ms) CHECK(ms > 0);
}

TEST_CASE("llvm backend: clear errors for bad source, arch and options", "[llvm]") {
  auto be = backend::make_backend("llvm");
  test::TempDir tmp;
  const std::string dir = tmp.path.string();
  CompileRequest bad = small_request();
  bad.source = "extern \"C\" __global__ void k() { this is not C++; }\n";
  bad.dump_dir = dir;
  try {
    be->compile(bad);
    FAIL("a bad source compiled");
  } catch (const CompileError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("clang failed to compile winnow_test_kernel.cu"));
    CHECK_THAT(e.log(), Catch::Contains("error:"));
    CHECK(e.source_path() == dir + "/winnow_test_kernel.cu");
  }
  CompileRequest sm100 = small_request();
  sm100.arch = backend::parse_arch("sm_100a");
  CHECK_THROWS_WITH(be->compile(sm100), Catch::Contains("sm_90a only"));
  CompileRequest opt = small_request();
  opt.options.push_back("--use_fast_math");
  CHECK_THROWS_WITH(be->compile(opt), Catch::Contains("-D options only"));
  CHECK_THROWS_AS(backend::make_nvrtc_backend()->llvm_ir(small_request()), std::invalid_argument);
}

TEST_CASE("llvm backend compiles the generated kernels: PTX entries as NVRTC's, cubins",
          "[llvm]") {
  auto llvm = backend::make_backend("llvm");
  auto nvrtc = backend::make_nvrtc_backend();
  struct Case {
    const char* what;
    ops::TopkProblem p;
    const char* entry;  // the module's main kernel
  };
  auto base = [](ir::Expr score, int heads, ops::DType t, ops::Mode mode) {
    ops::TopkProblem p;
    p.score = std::move(score);
    p.heads = heads;
    p.head_dim = 128;
    p.q_dtype = p.k_dtype = t;
    p.mode = mode;
    p.k = 256;
    p.arch = backend::parse_arch("sm_90a");
    return p;
  };
  const int pick = GENERATE(0, 1, 2, 3);
  const Case cases[] = {
      {"relu_mh fp8 top-k (wgmma, TMA, mbarriers)",
       base(ir::relu_mh(true), 64, ops::DType::E4M3, ops::Mode::TopK), "winnow_topk"},
      // One head, bf16, dense, sm_90a: the retrieval mode (the default since session 11).
      {"ip bf16 materialize", base(ir::ip(), 1, ops::DType::BF16, ops::Mode::Materialize),
       "winnow_knn_stream"},
      {"cosine fp32 materialize", base(ir::cosine(), 1, ops::DType::F32, ops::Mode::Materialize),
       "winnow_topk"},
      {"a user expression, top-k",
       base(ir::parse("sum_h(w[h] * softplus(dot(h))) * kscale"), 16, ops::DType::BF16,
            ops::Mode::TopK),
       "winnow_topk"},
  };
  const Case& c = cases[pick];
  INFO(c.what);
  auto op = ops::TopkOp::create(c.p, nullptr);
  CHECK(op->retrieval_mode() == (std::string(c.entry) == "winnow_knn_stream"));
  CompileRequest req = op->compile_request();
  req.options.clear();  // WINNOW_NVRTC_OPTIONS of the environment, if any, are not tested here
  const CompileResult a = llvm->compile(req, /*emit_ptx=*/true);
  const CompileResult b = nvrtc->compile(req, /*emit_ptx=*/true);
  REQUIRE(is_cuda_elf(a.cubin));
  CHECK(contains(a.cubin, c.entry));
  const std::string pa = entry_params(a.ptx, c.entry), pb = entry_params(b.ptx, c.entry);
  REQUIRE_FALSE(pa.empty());
  CHECK(pa == pb);  // the same kernel parameters: the launch code serves both
  if (pick == 0) {
    CHECK_THAT(a.ptx, Catch::Contains("wgmma.mma_async.sync.aligned.m64n128k32"));
    CHECK_THAT(a.ptx, Catch::Contains("cp.async.bulk.tensor"));
    // The TMA map is read in place (grid_constant), never copied to local memory.
    CHECK_THAT(a.ptx, Catch::Contains("cvta.param.u64"));
    CHECK_THAT(a.ptx, !Catch::Contains("__local_depot"));
  }
}

TEST_CASE("llvm backend compiles the block-select module", "[llvm]") {
  ops::BlockProblem p;
  p.arch = backend::parse_arch("sm_90a");
  auto op = ops::BlockSelectOp::create(p, nullptr);
  CompileRequest req = op->compile_request();
  req.options.clear();
  const CompileResult r = backend::make_backend("llvm")->compile(req);
  CHECK(is_cuda_elf(r.cubin));
}

TEST_CASE("llvm backend compiles the wgmma block attention module", "[llvm]") {
  ops::BlockProblem p;
  p.arch = backend::parse_arch("sm_90a");
  p.attention_wgmma = 1;
  CompileRequest req = ops::BlockAttentionOp::create(p, nullptr)->compile_request();
  req.options.clear();
  const CompileResult r = backend::make_backend("llvm")->compile(req);
  CHECK(is_cuda_elf(r.cubin));
}

TEST_CASE("the backend's name and version are part of the cache key", "[llvm]") {
  auto llvm = backend::make_backend("llvm");
  auto nvrtc = backend::make_nvrtc_backend();
  rt::CubinCache cache(std::nullopt);
  CompileRequest req = small_request();
  const auto a = ops::compile_cached(cache, *nvrtc, req, "winnow_test", "p", "test kernel");
  const auto b = ops::compile_cached(cache, *llvm, req, "winnow_test", "p", "test kernel");
  CHECK(a.key != b.key);
  CHECK(a.cubin != b.cubin);
  CHECK(ops::compile_cached(cache, *llvm, req, "winnow_test", "p", "test kernel").key == b.key);
}

#else

TEST_CASE("without LLVM the llvm backend is refused with the reason", "[llvm]") {
  CHECK_THROWS_WITH(backend::make_backend("llvm"), Catch::Contains("llvm backend is not available"));
  CHECK_THROWS_AS(ops::choose_backend("llvm"), ops::NotSupported);
}

#endif

TEST_CASE("backend choice: the caller's name, else WINNOW_BACKEND, else nvrtc", "[llvm]") {
  {
    test::ScopedEnv unset{"WINNOW_BACKEND", nullptr};
    CHECK(ops::choose_backend(nullptr)->name() == "nvrtc");
    CHECK(ops::choose_backend("")->name() == "nvrtc");
  }
  {
    test::ScopedEnv bad{"WINNOW_BACKEND", "gcc"};
    CHECK_THROWS_WITH(ops::choose_backend(nullptr), Catch::Contains("WINNOW_BACKEND must be nvrtc or llvm, not 'gcc'"));
    CHECK(ops::choose_backend("nvrtc")->name() == "nvrtc");  // the caller's name wins
  }
  CHECK_THROWS_AS(ops::choose_backend("NVRTC"), ops::InvalidArgument);
}

// clang 19's CUDA header hands __reduce_min_sync's and __reduce_max_sync's arguments to the
// builtins swapped (the mask as the value, the value as the member mask): an illegal
// instruction on the GPU under the llvm backend. A template that needs a warp reduction
// writes redux.sync as inline PTX instead.
TEST_CASE("no template calls __reduce_*_sync, whose arguments clang 19 swaps", "[codegen]") {
  int checked = 0;
  for (const auto& t : codegen::embedded_templates()) {
    const std::string text(t.text, t.size);
    INFO(t.name);
    const bool calls = text.find("__reduce_") != std::string::npos;
    CHECK_FALSE(calls);
    ++checked;
  }
  CHECK(checked > 40);
}
