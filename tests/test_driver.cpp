// The driver wrapper: loads (or explains why not) everywhere; [gpu] runs a real kernel.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "tests/support.h"

using namespace winnow::rt;

TEST_CASE("gpu_available never throws and explains a missing GPU", "[cache]") {
  std::string why;
  bool available = false;
  REQUIRE_NOTHROW(available = gpu_available(&why));
  CHECK(gpu_available(nullptr) == available);  // cached, same answer
  if (!available) {
    CHECK(!why.empty());
    // With no driver, driver() refuses; with a driver but no device, Context does.
    CHECK_THROWS_AS(Context(0), NoDevice);
  }
}

TEST_CASE("check names the failed call and the code", "[cache]") {
  CHECK_NOTHROW(check(CUDA_SUCCESS, "cuInit"));
  try {
    check(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc");
    FAIL("no throw");
  } catch (const CudaError& e) {
    CHECK(e.code() == CUDA_ERROR_INVALID_VALUE);
    std::string what = e.what();
    CHECK(what.rfind("cuMemAlloc failed: ", 0) == 0);
    CHECK(what.find("(code 1)") != std::string::npos);
  }
}

TEST_CASE("a compiled kernel runs on the device", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  Context ctx(0);
  const DeviceInfo& info = ctx.info();
  CHECK(!info.name.empty());
  CHECK(info.sm_count > 0);
  CHECK(info.max_smem_optin >= 48 * 1024);
  CHECK(info.l2_bytes > 0);

  winnow::backend::CompileRequest req;
  req.source = R"(
extern "C" __global__ void winnow_pattern(unsigned* out, unsigned n, unsigned salt) {
  extern __shared__ unsigned scratch[];
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i * 2654435761u ^ salt;
  __syncthreads();
  if (i < n) out[i] = scratch[threadIdx.x];
}
)";
  req.source_name = "winnow_pattern.cu";
  req.arch = winnow::backend::parse_arch("sm_" + std::to_string(info.cc_major) +
                                         std::to_string(info.cc_minor));
  auto cubin = winnow::backend::make_nvrtc_backend()->compile(req).cubin;

  const unsigned threads = 256, n = 1000, salt = 0x5a5a1234u;
  // Above 48 KiB so that the opt-in attribute is exercised.
  const int smem = 64 * 1024;
  LoadedKernel kernel(ctx, cubin, "winnow_pattern", smem);
  CHECK(kernel.num_registers() > 0);
  CHECK(kernel.max_blocks_per_sm(threads) >= 1);

  DeviceBuffer out(n * sizeof(unsigned));
  std::vector<unsigned> host(n, 0xdeadbeefu);
  out.upload(host.data(), host.size() * sizeof(unsigned));
  std::vector<unsigned> back(n, 0);
  out.download(back.data(), back.size() * sizeof(unsigned));
  CHECK(back == host);  // copy round trip

  CUdeviceptr ptr = out.ptr();
  unsigned count = n, s = salt;
  void* args[] = {&ptr, &count, &s};
  kernel.launch((n + threads - 1) / threads, 1, threads, nullptr, args);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  out.download(back.data(), back.size() * sizeof(unsigned));
  for (unsigned i = 0; i < n; ++i) {
    INFO("i = " << i);
    REQUIRE(back[i] == (i * 2654435761u ^ salt));
  }
}

TEST_CASE("the last Context's destruction leaves no destroyed context current", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  const DriverApi& d = driver();
  { Context first(0); }
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, 0), "cuDeviceGet");
  unsigned flags = 0;
  int active = 0;
  check(d.cuDevicePrimaryCtxGetState(dev, &flags, &active), "cuDevicePrimaryCtxGetState");
  CUcontext current = nullptr;
  check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  // Another owner in this process (the [gpu] fixture) may keep the primary context alive;
  // then it may stay current. Otherwise it is gone and nothing may be current.
  if (!active) CHECK(current == nullptr);
  // A second context works from scratch: allocate, launch nothing, synchronise.
  Context second(0);
  DeviceBuffer b(256);
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  CHECK(current == second.handle());
}

TEST_CASE("cuCtxSynchronize is the void entry point, whatever the first argument register holds",
          "[gpu]") {
  WINNOW_REQUIRE_GPU();
  Context ctx(0);
  // CUDA 13's "cuCtxSynchronize" at version 13000 is cuCtxSynchronize_v2(CUcontext): asked
  // for at the toolkit's version, a call without arguments synchronised whatever context
  // the register held ("context is destroyed", code 709). Calling the entry point with a
  // bogus context in that register (an extra argument, ignored by a void function in the
  // x86-64 and AArch64 calling conventions) tells the two apart.
  using WithContext = CUresult (*)(CUcontext);
  const auto as_v2 = reinterpret_cast<WithContext>(reinterpret_cast<void*>(driver().cuCtxSynchronize));
  CHECK(as_v2(reinterpret_cast<CUcontext>(uintptr_t(0x5a5a5a50))) == CUDA_SUCCESS);
  CHECK(driver().cuCtxSynchronize() == CUDA_SUCCESS);
}
