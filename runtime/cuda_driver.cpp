// Opening the CUDA driver at run time and the small RAII wrappers over it (context,
// loaded kernel). DeviceBuffer lives in device_buffer.cpp.
#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <string>

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

// The driver entry points are asked for by base name at the toolkit's version, so the
// driver hands back the ABI winnow was compiled against (cuMemAlloc -> cuMemAlloc_v2).
bool resolve(GetProcAddress get, const char* name, void** slot, std::string* why) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = get(name, slot, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
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
#define WINNOW_RESOLVE(f) \
  if (!resolve(get, #f, reinterpret_cast<void**>(&a.f), &s.why_not)) return s
  WINNOW_RESOLVE(cuInit);
  WINNOW_RESOLVE(cuGetErrorString);
  WINNOW_RESOLVE(cuDeviceGetCount);
  WINNOW_RESOLVE(cuDeviceGet);
  WINNOW_RESOLVE(cuDeviceGetAttribute);
  WINNOW_RESOLVE(cuDeviceGetName);
  WINNOW_RESOLVE(cuDevicePrimaryCtxRetain);
  WINNOW_RESOLVE(cuDevicePrimaryCtxRelease);
  WINNOW_RESOLVE(cuCtxGetCurrent);
  WINNOW_RESOLVE(cuCtxSetCurrent);
  WINNOW_RESOLVE(cuCtxSynchronize);
  WINNOW_RESOLVE(cuModuleLoadData);
  WINNOW_RESOLVE(cuModuleUnload);
  WINNOW_RESOLVE(cuModuleGetFunction);
  WINNOW_RESOLVE(cuFuncSetAttribute);
  WINNOW_RESOLVE(cuFuncGetAttribute);
  WINNOW_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  WINNOW_RESOLVE(cuLaunchKernelEx);
  WINNOW_RESOLVE(cuTensorMapEncodeTiled);
  WINNOW_RESOLVE(cuMemAlloc);
  WINNOW_RESOLVE(cuMemFree);
  WINNOW_RESOLVE(cuMemcpyHtoD);
  WINNOW_RESOLVE(cuMemcpyDtoH);
  WINNOW_RESOLVE(cuMemsetD32Async);
  WINNOW_RESOLVE(cuMemsetD8);
  WINNOW_RESOLVE(cuMemGetInfo);
  WINNOW_RESOLVE(cuPointerGetAttribute);
  WINNOW_RESOLVE(cuStreamCreate);
  WINNOW_RESOLVE(cuStreamDestroy);
  WINNOW_RESOLVE(cuStreamSynchronize);
  WINNOW_RESOLVE(cuEventCreate);
  WINNOW_RESOLVE(cuEventDestroy);
  WINNOW_RESOLVE(cuEventRecord);
  WINNOW_RESOLVE(cuEventSynchronize);
  WINNOW_RESOLVE(cuEventElapsedTime);
  WINNOW_RESOLVE(cuStreamBeginCapture);
  WINNOW_RESOLVE(cuStreamEndCapture);
  WINNOW_RESOLVE(cuGraphLaunch);
  WINNOW_RESOLVE(cuGraphExecDestroy);
  WINNOW_RESOLVE(cuGraphDestroy);
#undef WINNOW_RESOLVE
  // cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags (the member's
  // signature); the old base name resolves to the 5-argument CUDA 11 entry point.
  if (!resolve(get, "cuGraphInstantiateWithFlags", reinterpret_cast<void**>(&a.cuGraphInstantiate),
               &s.why_not))
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
  } catch (...) {
    d.cuDevicePrimaryCtxRelease(dev_);
    throw;
  }
}

Context::~Context() {
  // Destructors never throw; a failing release at process exit is harmless.
  if (ctx_) driver().cuDevicePrimaryCtxRelease(dev_);
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
                          void** args) const {
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
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  check(d.cuLaunchKernelEx(&cfg, fn_, args, nullptr), "cuLaunchKernelEx");
}

}  // namespace winnow::rt
