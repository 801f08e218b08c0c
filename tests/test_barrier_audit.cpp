// The barrier audit (templates/debug/barrier_audit.cuh, -DWINNOW_BARRIER_AUDIT=1): it compiles
// into the topk kernel only when asked for, it tells CTA barriers that pair the same call
// sites from ones that do not, and the wgmma kernel with its producer warp passes it on
// the inputs where racecheck reports hazards across the select's barriers (issue 11).
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "compiler/codegen/embedded_templates.h"
#include "ops/common/topk_op.h"
#include "support.h"
#include "topk_check.h"

using namespace winnow;

namespace {

backend::CompileRequest wgmma_topk_request(bool audit) {
  ops::TopkProblem p = test::relu_mh_problem(64, 2048, ops::DType::E4M3);
  p.arch = backend::parse_arch("sm_90a");
  auto op = ops::TopkOp::create(p, nullptr);
  backend::CompileRequest req = op->compile_request();
  if (audit) req.options.push_back("-DWINNOW_BARRIER_AUDIT=1");
  std::sort(req.options.begin(), req.options.end());
  return req;
}

}  // namespace

TEST_CASE("the barrier audit is in the topk kernel only when switched on", "[nvrtc]") {
  const bool audit = GENERATE(false, true);
  INFO("audit " << audit);
  const backend::CompileResult r =
      backend::make_nvrtc_backend()->compile(wgmma_topk_request(audit), /*emit_ptx=*/true);
  CHECK((r.ptx.find("barrier_audit_hash") != std::string::npos) == audit);
  CHECK((r.ptx.find("trap;") != std::string::npos) == audit);
  CHECK(r.ptx.find("wgmma.mma_async") != std::string::npos);  // the producer warp's kernel
}

TEST_CASE("the barrier audit tells aligned CTA barriers from misaligned ones", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  rt::Context ctx(0);
  backend::CompileRequest req;
  // Warp 0 and the other warps pass one CTA barrier each: the same call site (aligned), or
  // two different ones (what barrier.sync.aligned forbids; the hardware still pairs them).
  req.source = R"(
#include "debug/barrier_audit.cuh"
template <bool Misaligned>
__device__ void body(unsigned* agrees) {
  winnow::barrier_audit_begin();
  if (Misaligned) {
    if (threadIdx.x < 32) {
      __syncthreads();
    } else {
      __syncthreads();
    }
  } else {
    __syncthreads();
  }
  agrees[blockIdx.x * blockDim.x + threadIdx.x] = winnow::barrier_audit_agrees() ? 1u : 0u;
}
extern "C" __global__ void audit_aligned(unsigned* agrees) { body<false>(agrees); }
extern "C" __global__ void audit_misaligned(unsigned* agrees) { body<true>(agrees); }
)";
  req.source_name = "winnow_barrier_audit_test.cu";
  for (const auto& t : codegen::embedded_templates())
    if (std::string(t.name) == "debug/barrier_audit.cuh")
      req.headers.emplace_back(t.name, std::string(t.text, t.size));
  REQUIRE(req.headers.size() == 1);
  req.options = {"-DWINNOW_BARRIER_AUDIT=1"};
  const rt::DeviceInfo& info = ctx.info();
  req.arch = backend::parse_arch("sm_" + std::to_string(info.cc_major) +
                                 std::to_string(info.cc_minor) + (info.cc_major == 9 ? "a" : ""));
  const auto cubin = backend::make_nvrtc_backend()->compile(req).cubin;
  const unsigned blocks = 3, threads = 128;
  for (const bool misaligned : {false, true}) {
    INFO((misaligned ? "misaligned" : "aligned"));
    rt::LoadedKernel kernel(ctx, cubin, misaligned ? "audit_misaligned" : "audit_aligned", 0);
    rt::DeviceBuffer out(blocks * threads * sizeof(unsigned));
    std::vector<unsigned> back(blocks * threads, 7u);
    out.upload(back.data(), back.size() * sizeof(unsigned));
    CUdeviceptr ptr = out.ptr();
    void* args[] = {&ptr};
    kernel.launch(blocks, 1, threads, nullptr, args);
    rt::check(rt::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    out.download(back.data(), back.size() * sizeof(unsigned));
    for (unsigned i = 0; i < blocks * threads; ++i) {
      INFO("thread " << i % threads << " of CTA " << i / threads);
      // Thread 0 is in warp 0: warp 0 agrees with it, the others only when aligned.
      REQUIRE(back[i] == ((!misaligned || i % threads < 32) ? 1u : 0u));
    }
  }
}

TEST_CASE("heavy ties on the producer warp's kernel pass the barrier audit, exact", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  // The case where racecheck reports hazards between the producer warp and warp 0 across
  // the select's CTA barriers (bench/NOTES.md, "Issue 11's racecheck reports"). A thread
  // that passed other barrier sites than thread 0 traps the kernel: the run then fails.
  test::ScopedEnv audit("WINNOW_NVRTC_OPTIONS", "-DWINNOW_BARRIER_AUDIT=1");
  const int k = GENERATE(100, 2048);
  auto p = test::relu_mh_problem(64, k, ops::DType::E4M3);
  p.sorted = true;
  ops::DataOptions opt;
  opt.levels = 4;
  test::run_and_check(p, 16, 4099, opt, {0, 5, 15}, true);
}
