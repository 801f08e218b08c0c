// The NVRTC backend: generated source + in-memory headers -> cubin (and PTX on request).
// It does not read the environment (compiler/ never includes runtime/): extra options
// such as WINNOW_NVRTC_OPTIONS arrive in CompileRequest::options.
#include <nvrtc.h>

#include "compiler/backend/backend.h"
#include "compiler/backend/dump_sources.h"

namespace winnow::backend {
namespace {

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// True when an option passes -v (or --verbose) to ptxas: "--ptxas-options=-v",
// "-Xptxas=-v", or a comma list holding it.
bool asks_ptxas_report(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    for (const char* prefix : {"--ptxas-options=", "-Xptxas="}) {
      if (o.rfind(prefix, 0) != 0) continue;
      std::string list = o.substr(std::string(prefix).size()) + ",";
      for (size_t at = 0, next; (next = list.find(',', at)) != std::string::npos; at = next + 1) {
        const std::string item = list.substr(at, next - at);
        if (item == "-v" || item == "--verbose") return true;
      }
    }
  }
  return false;
}

bool nvrtc_at_least(int major, int minor) {
  int ma = 0, mi = 0;
  if (nvrtcVersion(&ma, &mi) != NVRTC_SUCCESS) return false;
  return ma > major || (ma == major && mi >= minor);
}

[[noreturn]] void fail(const CompileRequest& req, const std::string& what, const std::string& log) {
  throw_compile_error(req, "NVRTC", what, log);
}

class NvrtcBackend final : public Backend {
 public:
  std::string name() const override { return "nvrtc"; }

  std::string version() const override {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    return std::to_string(major) + "." + std::to_string(minor);
  }

  CompileResult compile(const CompileRequest& req, bool emit_ptx) const override {
    std::vector<const char*> header_names, header_texts;
    for (const auto& [name, text] : req.headers) {
      header_names.push_back(name.c_str());
      header_texts.push_back(text.c_str());
    }
    nvrtcProgram prog = nullptr;
    nvrtcResult r = nvrtcCreateProgram(&prog, req.source.c_str(), req.source_name.c_str(),
                                       static_cast<int>(req.headers.size()), header_texts.data(),
                                       header_names.data());
    if (r != NVRTC_SUCCESS)
      fail(req, std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(r), "");
    struct Destroy {
      nvrtcProgram* p;
      ~Destroy() { nvrtcDestroyProgram(p); }
    } destroy{&prog};

    // A real arch, so that NVRTC produces SASS; --fmad=false keeps each mul and add
    // exact (the generated code asks for fmaf where it wants fusion). No -lineinfo: it
    // changes no instruction (same SASS, checked by a [nvrtc] test) and makes cubins 3-4x
    // larger (line tables and the PTX text) for no measurable compile time; profiling
    // asks for it through WINNOW_NVRTC_OPTIONS=-lineinfo.
    std::vector<std::string> options = {"--gpu-architecture=" + req.arch.str(), "-std=c++17",
                                        "-default-device", "--fmad=false"};
    options.insert(options.end(), req.options.begin(), req.options.end());
    // NVRTC 12.9 and later keep compiled programs in the driver's compute cache where a
    // driver is present, and a hit runs no ptxas, so a request for ptxas's report (-v)
    // would get an empty log (the [nvrtc] spill checks would then fail wherever another
    // process had compiled the same module).
    if (asks_ptxas_report(req.options) && nvrtc_at_least(12, 9)) options.push_back("--no-cache");
    std::vector<const char*> option_ptrs;
    for (const std::string& o : options) option_ptrs.push_back(o.c_str());

    r = nvrtcCompileProgram(prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());
    CompileResult result;
    result.log = program_log(prog);
    if (r != NVRTC_SUCCESS) fail(req, nvrtcGetErrorString(r), result.log);

    size_t size = 0;
    r = nvrtcGetCUBINSize(prog, &size);
    if (r == NVRTC_SUCCESS) {
      result.cubin.resize(size);
      r = nvrtcGetCUBIN(prog, result.cubin.data());
    }
    if (r != NVRTC_SUCCESS)
      fail(req, std::string("nvrtcGetCUBIN: ") + nvrtcGetErrorString(r), result.log);
    if (emit_ptx) {
      r = nvrtcGetPTXSize(prog, &size);
      if (r == NVRTC_SUCCESS) {
        result.ptx.resize(size);
        r = nvrtcGetPTX(prog, result.ptx.data());
      }
      if (r != NVRTC_SUCCESS)
        fail(req, std::string("nvrtcGetPTX: ") + nvrtcGetErrorString(r), result.log);
      while (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Backend> make_nvrtc_backend() { return std::make_unique<NvrtcBackend>(); }

}  // namespace winnow::backend
