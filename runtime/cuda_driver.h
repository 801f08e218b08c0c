// The CUDA Driver API, opened at run time (dlopen of libcuda.so.1), so that winnow loads
// and compiles on machines with no GPU driver. Every call's status is checked.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace winnow::rt {

// A driver call failed: what() names the call and the driver's error string.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& msg, CUresult code) : std::runtime_error(msg), code_(code) {}
  CUresult code() const { return code_; }
 private:
  CUresult code_;
};
// No driver library, or no device.
class NoDevice : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True when libcuda loads, cuInit succeeds and at least one device exists. Cheap after
// the first call. `why` receives the reason when false.
bool gpu_available(std::string* why = nullptr);

// The driver entry points winnow uses, resolved once (cuGetProcAddress).
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned*, int*);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  // tests, tools
  CUresult (*cuMemcpyPeer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);  // tools
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  // Conditional graph nodes (CUDA 12.3 drivers and later; null where the driver lacks
  // them, see conditional_graphs()): the paged decode call's fallback rounds under capture.
  CUresult (*cuStreamGetCaptureInfo)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                     const CUgraphNode**, const CUgraphEdgeData**, size_t*);
  CUresult (*cuStreamUpdateCaptureDependencies)(CUstream, CUgraphNode*, const CUgraphEdgeData*,
                                                size_t, unsigned);
  CUresult (*cuStreamBeginCaptureToGraph)(CUstream, CUgraph, const CUgraphNode*,
                                          const CUgraphEdgeData*, size_t, CUstreamCaptureMode);
  CUresult (*cuGraphConditionalHandleCreate)(CUgraphConditionalHandle*, CUgraph, CUcontext,
                                             unsigned, unsigned);
  CUresult (*cuGraphAddNode)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                             size_t, CUgraphNodeParams*);
  bool conditional_graphs() const {
    return cuStreamGetCaptureInfo && cuStreamUpdateCaptureDependencies &&
           cuStreamBeginCaptureToGraph && cuGraphConditionalHandleCreate && cuGraphAddNode;
  }
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                     const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                     const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
};
// Throws NoDevice when the driver cannot be loaded or initialised.
const DriverApi& driver();

// Throws CudaError naming `what` when r is not CUDA_SUCCESS.
void check(CUresult r, const char* what);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes per block after cuFuncSetAttribute
  int l2_bytes = 0;
  int driver_version = 0;  // cuDriverGetVersion: 1000 major + 10 minor
};

// The primary context of one device (shared with PyTorch and the runtime API), retained
// for the object's lifetime. Made current on the calling thread by the constructor and by
// bind(). When the destructor drops the last reference (the driver then deinitialises
// the primary context), it unbinds the context from the calling thread, so that no
// destroyed context stays current there; other threads that bound it must bind again.
class Context {
 public:
  explicit Context(int ordinal);  // throws NoDevice / CudaError
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void bind() const;  // cuCtxSetCurrent
  const DeviceInfo& info() const { return info_; }
  CUcontext handle() const { return ctx_; }
 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  DeviceInfo info_;
};

// A loaded cubin and one kernel in it.
class LoadedKernel {
 public:
  LoadedKernel(const Context& ctx, const std::vector<char>& cubin, const char* entry,
               int dynamic_smem_bytes);  // sets the dynamic shared-memory limit
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;
  CUfunction function() const { return fn_; }
  int dynamic_smem_bytes() const { return smem_; }
  int max_blocks_per_sm(int threads) const;  // occupancy
  int num_registers() const;
  // cuLaunchKernelEx on the caller's stream. args: array of pointers to arguments.
  // programmatic: the launch may start before the kernel before it on the stream has
  // completed (programmatic dependent launch, sm_90); only for a kernel that waits for it
  // (templates/ptx/grid_dependency.cuh) and follows a kernel of the same call.
  void launch(unsigned grid_x, unsigned grid_y, unsigned block_x, CUstream stream,
              void** args, bool programmatic = false) const;
 private:
  CUcontext ctx_ = nullptr;  // the module's context: unloading needs it current
  CUmodule mod_ = nullptr;
  CUfunction fn_ = nullptr;
  int smem_ = 0;
};

// RAII device buffer for tools and tests (execute itself never allocates).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  size_t size() const { return bytes_; }
  void upload(const void* src, size_t bytes);
  void download(void* dst, size_t bytes) const;
 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace winnow::rt
