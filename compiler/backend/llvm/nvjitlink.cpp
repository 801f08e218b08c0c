// PTX -> cubin through nvJitLink: the PTX goes in as one input, the linked cubin comes out.
#include "compiler/backend/llvm/nvjitlink.h"

#include <nvJitLink.h>

#include "compiler/backend/dump_sources.h"

namespace winnow::backend::llvm_be {
namespace {

std::string read_log(nvJitLinkHandle h, bool error) {
  size_t size = 0;
  const nvJitLinkResult r = error ? nvJitLinkGetErrorLogSize(h, &size) : nvJitLinkGetInfoLogSize(h, &size);
  if (r != NVJITLINK_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if ((error ? nvJitLinkGetErrorLog(h, log.data()) : nvJitLinkGetInfoLog(h, log.data())) !=
      NVJITLINK_SUCCESS)
    return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string nvjitlink_version() {
  unsigned major = 0, minor = 0;
  if (nvJitLinkVersion(&major, &minor) != NVJITLINK_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<char> ptx_to_cubin(const std::string& ptx, const CompileRequest& req,
                               std::string* info_log) {
  const std::string arch = "-arch=" + req.arch.str();
  const char* options[] = {arch.c_str(), "-O3"};
  nvJitLinkHandle h = nullptr;
  nvJitLinkResult r = nvJitLinkCreate(&h, 2, options);
  if (r != NVJITLINK_SUCCESS)
    throw_compile_error(req, "nvJitLink", "nvJitLinkCreate failed (" + std::to_string(r) + ")", "");
  struct Destroy {
    nvJitLinkHandle* h;
    ~Destroy() { nvJitLinkDestroy(h); }
  } destroy{&h};
  const std::string name = req.source_name + ".ptx";
  r = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), name.c_str());
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(h);
  if (r != NVJITLINK_SUCCESS)
    throw_compile_error(req, "nvJitLink", "PTX to cubin failed (" + std::to_string(r) + ")",
                        read_log(h, true));
  size_t size = 0;
  std::vector<char> cubin;
  r = nvJitLinkGetLinkedCubinSize(h, &size);
  if (r == NVJITLINK_SUCCESS) {
    cubin.resize(size);
    r = nvJitLinkGetLinkedCubin(h, cubin.data());
  }
  if (r != NVJITLINK_SUCCESS)
    throw_compile_error(req, "nvJitLink", "nvJitLinkGetLinkedCubin failed", read_log(h, true));
  if (info_log) *info_log = read_log(h, false);
  return cubin;
}

}  // namespace winnow::backend::llvm_be
