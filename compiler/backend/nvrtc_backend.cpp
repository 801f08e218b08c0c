// The NVRTC backend: generated source + in-memory headers -> cubin (and PTX on request).
// It does not read the environment (compiler/ never includes runtime/): extra options
// such as WINNOW_NVRTC_OPTIONS arrive in CompileRequest::options.
#include <nvrtc.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/backend/backend.h"

namespace winnow::backend {
namespace {

namespace fs = std::filesystem;

// A name from the request as a relative path that stays inside the dump folder.
fs::path contained(const std::string& name, const char* fallback) {
  fs::path p = fs::path(name).lexically_normal();
  if (name.empty() || p.is_absolute() || p.empty() || *p.begin() == "..") return fallback;
  return p;
}

bool write_text(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return !out.fail();
}

// Writes the source (and headers under include/) so a failed compile can be replayed.
// Returns the source's path, or "" when nothing could be written.
std::string dump_sources(const CompileRequest& req) {
  fs::path dir;
  std::error_code ec;
  if (!req.dump_dir.empty()) {
    dir = req.dump_dir;
  } else {
    std::random_device rd;
    dir = fs::temp_directory_path(ec) /
          ("winnow-failed-" + std::to_string(rd()) + std::to_string(rd()));
    if (ec) return "";
  }
  fs::path source = dir / contained(req.source_name, "source.cu");
  if (!write_text(source, req.source)) return "";
  for (const auto& [name, text] : req.headers)
    write_text(dir / "include" / contained(name, "header.cuh"), text);
  return source.string();
}

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

[[noreturn]] void fail(const CompileRequest& req, const std::string& what, const std::string& log) {
  std::string path = dump_sources(req);
  std::string msg = "NVRTC failed to compile " + req.source_name + " for " + req.arch.str() + ": " +
                    what + "\n" + log + "\n";
  msg += path.empty() ? "generated source could not be written"
                      : "generated source written to " + path;
  throw CompileError(msg, log, path);
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
    // exact (the generated code asks for fmaf where it wants fusion).
    std::vector<std::string> options = {"--gpu-architecture=" + req.arch.str(), "-std=c++17",
                                        "-default-device", "--fmad=false", "-lineinfo"};
    options.insert(options.end(), req.options.begin(), req.options.end());
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
