// One interface for every way of turning generated source into a cubin (NVRTC now,
// the LLVM backend: clang + NVPTX + nvJitLink, loaded from libwinnow_llvm.so when asked). No CUDA driver calls: runs on machines with no GPU.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/backend/arch.h"

namespace winnow::backend {

struct CompileRequest {
  std::string source;       // the generated stub (a .cu translation unit)
  std::string source_name;  // e.g. "winnow_topk_<hash>.cu"
  // Headers handed to the compiler from memory: (include name, text).
  std::vector<std::pair<std::string, std::string>> headers;
  Arch arch;
  std::vector<std::string> options;  // extra compiler options, already sorted
  std::string dump_dir;  // where to write the source when compilation fails ("" = temp dir)
};

struct CompileResult {
  std::vector<char> cubin;
  std::string ptx;  // filled when asked for (emit_ptx)
  std::string log;  // compiler log (warnings), may be empty
  // Wall time per phase in ms, in order, where the backend measures them itself (the LLVM
  // backend; NVRTC reports its own through --time).
  std::vector<std::pair<std::string, double>> phase_ms;
};

// Compilation failed: what() holds the compiler log and the path of the written source.
class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& msg, std::string log, std::string source_path)
      : std::runtime_error(msg), log_(std::move(log)), source_path_(std::move(source_path)) {}
  const std::string& log() const { return log_; }
  const std::string& source_path() const { return source_path_; }
 private:
  std::string log_, source_path_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;     // "nvrtc" or "llvm"
  virtual std::string version() const = 0;  // exact version, e.g. "13.0"
  // Throws CompileError. emit_ptx also returns the PTX text.
  virtual CompileResult compile(const CompileRequest& req, bool emit_ptx = false) const = 0;
  // Loads what compiling needs (the llvm backend's module; nothing for NVRTC, which is
  // linked in). Throws CompileError saying why it cannot be loaded.
  virtual void load() const {}
  // The optimised LLVM IR of the request, for backends that have one; the others throw
  // std::invalid_argument.
  virtual std::string llvm_ir(const CompileRequest& req) const {
    throw std::invalid_argument("the " + name() + " backend produces no LLVM IR (use llvm)");
  }
};

std::unique_ptr<Backend> make_nvrtc_backend();
// The LLVM backend. Its name and version need nothing loaded; its first compile loads
// libwinnow_llvm.so (beside the library or executable that holds this code, else on the
// loader's search path) and throws CompileError saying why when that fails (LLVM's shared
// libraries missing). Throws std::runtime_error when this build has no LLVM backend.
std::unique_ptr<Backend> make_llvm_backend();
// "nvrtc" or "llvm"; anything else throws std::invalid_argument naming the choices.
std::unique_ptr<Backend> make_backend(std::string_view name);
inline constexpr const char* kBackendChoices = "nvrtc or llvm";

// libwinnow_llvm.so's entry point and the interface version both sides must agree on.
inline constexpr int kLlvmBackendAbi = 1;
extern "C" {
using LlvmBackendCreate = Backend* (*)(int abi);
}

}  // namespace winnow::backend
