// Opening the CUDA driver at run time and the small RAII wrappers over it (context,
// loaded kernel). DeviceBuffer lives in device_buffer.cpp.
#include "runtime/cuda_driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace winnow::rt {
namespace {

// Loaded once; never throws, so gpu_available() can be asked from anywhere.
struct DriverState {
  DriverApi api{};
  bool initialised = false;  // library loaded, every entry point found, cuInit succeeded
  int device_count = 0;
  std::string why_not;  // set when !initialised or device_count == 0
};

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// Each driver entry point is asked for by base name at the CUDA version of the ABI that
// its DriverApi member is declared with (the version in cudaTypedefs.h's PFN_<name>_v<N>,
// checked at compile time), never at the toolkit's version: a base name can change its
// ABI in a new toolkit, and CUDA 13.0 did so for cuCtxSynchronize, whose 13000 entry
// point takes a CUcontext. Called as the old void one, it read whatever the first argument
// register held as the context to synchronise ("context is destroyed", code 709).
bool resolve(GetProcAddress get, const char* name, int abi, void** slot, std::string* why) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = get(name, slot, abi, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *slot) return true;
  *why = std::string("the CUDA driver has no ") + name +
         (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? " (driver too old)" : "");
  return false;
}

DriverState load_driver() {
  DriverState s;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    s.why_not = "libcuda.so.1 not found: no NVIDIA driver";
    return s;
  }
  // Never dlclose'd: kernels and contexts may outlive any owner we could give it.
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get) {
    s.why_not = "libcuda has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12";
    return s;
  }
  DriverApi& a = s.api;
  // #f is the base name (macros are not expanded when stringised); a.f may expand to
  // the versioned member name that cuda.h maps it to, consistently everywhere.
#define WINNOW_CHECK_ABI(member, pfn, name, abi)                                      \
  static_assert(std::is_same_v<decltype(a.member), pfn>,                              \
                "DriverApi::" name " is not declared with the ABI of version " abi)
#define WINNOW_RESOLVE(f, abi)                                                        \
  WINNOW_CHECK_ABI(f, PFN_##f##_v##abi, #f, #abi);                                    \
  if (!resolve(get, #f, abi, reinterpret_cast<void**>(&a.f), &s.why_not)) return s
  WINNOW_RESOLVE(cuInit, 2000);
  WINNOW_RESOLVE(cuDriverGetVersion, 2020);
  WINNOW_RESOLVE(cuGetErrorString, 6000);
  WINNOW_RESOLVE(cuDeviceGetCount, 2000);
  WINNOW_RESOLVE(cuDeviceGet, 2000);
  WINNOW_RESOLVE(cuDeviceGetAttribute, 2000);
  WINNOW_RESOLVE(cuDeviceGetName, 2000);
  WINNOW_RESOLVE(cuDevicePrimaryCtxRetain, 7000);
  WINNOW_RESOLVE(cuDevicePrimaryCtxRelease, 11000);
  WINNOW_RESOLVE(cuDevicePrimaryCtxGetState, 7000);
  WINNOW_RESOLVE(cuCtxGetCurrent, 4000);
  WINNOW_RESOLVE(cuCtxSetCurrent, 4000);
  WINNOW_RESOLVE(cuCtxSynchronize, 2000);
  WINNOW_RESOLVE(cuModuleLoadData, 2000);
  WINNOW_RESOLVE(cuModuleUnload, 2000);
  WINNOW_RESOLVE(cuModuleGetFunction, 2000);
  WINNOW_RESOLVE(cuFuncSetAttribute, 9000);
  WINNOW_RESOLVE(cuFuncGetAttribute, 2020);
  WINNOW_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050);
  WINNOW_RESOLVE(cuLaunchKernelEx, 11060);
  WINNOW_RESOLVE(cuTensorMapEncodeTiled, 12000);
  WINNOW_RESOLVE(cuMemAlloc, 3020);
  WINNOW_RESOLVE(cuMemFree, 3020);
  WINNOW_RESOLVE(cuMemcpyHtoD, 3020);
  WINNOW_RESOLVE(cuMemcpyDtoH, 3020);
  WINNOW_RESOLVE(cuMemsetD32Async, 3020);
  WINNOW_RESOLVE(cuMemcpyDtoDAsync, 3020);
  WINNOW_RESOLVE(cuMemcpyPeer, 4000);
  WINNOW_RESOLVE(cuMemsetD8, 3020);
  WINNOW_RESOLVE(cuMemGetInfo, 3020);
  WINNOW_RESOLVE(cuPointerGetAttribute, 4000);
  WINNOW_RESOLVE(cuStreamCreate, 2000);
  WINNOW_RESOLVE(cuStreamDestroy, 4000);
  WINNOW_RESOLVE(cuStreamSynchronize, 2000);
  WINNOW_RESOLVE(cuStreamIsCapturing, 10000);
  WINNOW_RESOLVE(cuEventCreate, 2000);
  WINNOW_RESOLVE(cuEventDestroy, 4000);
  WINNOW_RESOLVE(cuEventRecord, 2000);
  WINNOW_RESOLVE(cuEventSynchronize, 2000);
#if CUDA_VERSION >= 12080
  WINNOW_RESOLVE(cuEventElapsedTime, 12080);  // cuda.h maps it to cuEventElapsedTime_v2
#else
  WINNOW_RESOLVE(cuEventElapsedTime, 2000);
#endif
  WINNOW_RESOLVE(cuStreamBeginCapture, 10010);
  WINNOW_RESOLVE(cuStreamEndCapture, 10000);
  WINNOW_RESOLVE(cuGraphLaunch, 10000);
  WINNOW_RESOLVE(cuGraphExecDestroy, 10000);
  WINNOW_RESOLVE(cuGraphDestroy, 10000);
  // Optional: left null where the driver lacks them (DriverApi::conditional_graphs).
#define WINNOW_RESOLVE_OPTIONAL(f, abi)                                               \
  WINNOW_CHECK_ABI(f, PFN_##f##_v##abi, #f, #abi);                                    \
  if (std::string ignored; !resolve(get, #f, abi, reinterpret_cast<void**>(&a.f), &ignored)) \
    a.f = nullptr
  WINNOW_RESOLVE_OPTIONAL(cuStreamGetCaptureInfo, 12030);
  WINNOW_RESOLVE_OPTIONAL(cuStreamUpdateCaptureDependencies, 12030);
  WINNOW_RESOLVE_OPTIONAL(cuStreamBeginCaptureToGraph, 12030);
  WINNOW_RESOLVE_OPTIONAL(cuGraphConditionalHandleCreate, 12030);
  WINNOW_RESOLVE_OPTIONAL(cuGraphAddNode, 12030);
#undef WINNOW_RESOLVE_OPTIONAL
#undef WINNOW_RESOLVE
#undef WINNOW_CHECK_ABI
  // cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags (the member's
  // signature); the old base name resolves to the 5-argument CUDA 11 entry point.
  static_assert(std::is_same_v<decltype(a.cuGraphInstantiate), PFN_cuGraphInstantiateWithFlags_v11040>);
  if (!resolve(get, "cuGraphInstantiateWithFlags", 11040,
               reinterpret_cast<void**>(&a.cuGraphInstantiate), &s.why_not))
    return s;

  if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    const char* msg = nullptr;
    if (a.cuGetErrorString(r, &msg) != CUDA_SUCCESS || !msg) msg = "unknown error";
    s.why_not = std::string("cuInit failed: ") + msg + " (code " + std::to_string(r) + ")";
    return s;
  }
  s.initialised = true;
  if (a.cuDeviceGetCount(&s.device_count) != CUDA_SUCCESS || s.device_count <= 0) {
    s.device_count = 0;
    s.why_not = "no CUDA device";
  }
  return s;
}

const DriverState& state() {
  static const DriverState s = load_driver();  // thread-safe, once
  return s;
}

// Releases one reference to dev's primary context ctx. The last release deinitialises it
// but leaves it current on the calling thread, where every later call (cuMemAlloc,
// cuCtxSynchronize, the next test's) would fail with "context is destroyed": unbind it.
void release_primary(CUdevice dev, CUcontext ctx) {
  const DriverApi& d = state().api;
  d.cuDevicePrimaryCtxRelease(dev);
  unsigned flags = 0;
  int active = 1;
  CUcontext current = nullptr;
  if (d.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active &&
      d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx)
    d.cuCtxSetCurrent(nullptr);
}

}  // namespace

bool gpu_available(std::string* why) {
  const DriverState& s = state();
  bool ok = s.initialised && s.device_count > 0;
  if (!ok && why) *why = s.why_not;
  return ok;
}

const DriverApi& driver() {
  const DriverState& s = state();
  if (!s.initialised) throw NoDevice(s.why_not);
  return s.api;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  const DriverState& s = state();
  if (!s.api.cuGetErrorString || s.api.cuGetErrorString(r, &msg) != CUDA_SUCCESS || !msg)
    msg = "unknown error";
  throw CudaError(std::string(what) + " failed: " + msg + " (code " + std::to_string(r) + ")", r);
}

Context::Context(int ordinal) {
  const DriverApi& d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw NoDevice("no CUDA device with ordinal " + std::to_string(ordinal) + " (" +
                   std::to_string(count) + " present)");
  check(d.cuDeviceGet(&dev_, ordinal), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
  try {
    bind();
    info_.ordinal = ordinal;
    char name[256] = {};
    check(d.cuDeviceGetName(name, sizeof(name) - 1, dev_), "cuDeviceGetName");
    info_.name = name;
    auto attr = [&](CUdevice_attribute a, int* out) {
      check(d.cuDeviceGetAttribute(out, a, dev_), "cuDeviceGetAttribute");
    };
    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info_.cc_major);
    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info_.cc_minor);
    attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info_.sm_count);
    attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info_.max_smem_optin);
    attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info_.l2_bytes);
    check(d.cuDriverGetVersion(&info_.driver_version), "cuDriverGetVersion");
  } catch (...) {
    release_primary(dev_, ctx_);
    throw;
  }
}

Context::~Context() {
  // Destructors never throw; a failing release at process exit is harmless.
  if (ctx_) release_primary(dev_, ctx_);
}

void Context::bind() const { check(driver().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

LoadedKernel::LoadedKernel(const Context& ctx, const std::vector<char>& cubin, const char* entry,
                           int dynamic_smem_bytes)
    : ctx_(ctx.handle()), smem_(dynamic_smem_bytes) {
  const DriverApi& d = driver();
  ctx.bind();
  check(d.cuModuleLoadData(&mod_, cubin.data()), "cuModuleLoadData");
  try {
    check(d.cuModuleGetFunction(&fn_, mod_, entry), "cuModuleGetFunction");
    // Above 48 KiB a kernel must opt in to dynamic shared memory before launch.
    if (smem_ > 48 * 1024)
      check(d.cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_),
            "cuFuncSetAttribute");
  } catch (...) {
    d.cuModuleUnload(mod_);
    throw;
  }
}

LoadedKernel::~LoadedKernel() {
  const DriverApi& d = driver();
  CUcontext current = nullptr;
  // cuModuleUnload acts on the current context: unload under ours, then restore.
  d.cuCtxGetCurrent(&current);
  if (current != ctx_) d.cuCtxSetCurrent(ctx_);
  d.cuModuleUnload(mod_);
  if (current != ctx_) d.cuCtxSetCurrent(current);
}

int LoadedKernel::max_blocks_per_sm(int threads) const {
  int blocks = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn_, threads,
                                                             static_cast<size_t>(smem_)),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

int LoadedKernel::num_registers() const {
  int regs = 0;
  check(driver().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn_), "cuFuncGetAttribute");
  return regs;
}

void LoadedKernel::launch(unsigned grid_x, unsigned grid_y, unsigned block_x, CUstream stream,
                          void** args, bool programmatic) const {
  const DriverApi& d = driver();
  // A fresh thread has no current context; one the caller made current is left alone.
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && !current)
    check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid_x;
  cfg.gridDimY = grid_y;
  cfg.gridDimZ = 1;
  cfg.blockDimX = block_x;
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem_);
  cfg.hStream = stream;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = programmatic ? &attr : nullptr;
  cfg.numAttrs = programmatic ? 1 : 0;
  check(d.cuLaunchKernelEx(&cfg, fn_, args, nullptr), "cuLaunchKernelEx");
}

}  // namespace winnow::rt
