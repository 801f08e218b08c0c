// Backend by name, and the LLVM backend loaded from its shared library on first use: the
// library and the tool start and compile with NVRTC where LLVM's libraries are absent.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "compiler/backend/backend.h"

namespace winnow::backend {
namespace {

constexpr const char* kLlvmLibrary = "libwinnow_llvm.so";

// The folder of the object (executable or libwinnow.so) that holds this function.
std::string own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? "" : path.parent_path().string();
}

LlvmBackendCreate load_entry(std::string* why) {
  std::string errors;
  void* handle = nullptr;
  if (const std::string dir = own_folder(); !dir.empty()) {
    const std::string beside = dir + "/" + kLlvmLibrary;
    if (std::filesystem::exists(beside)) {
      handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) errors += std::string(dlerror()) + "; ";
    }
  }
  if (!handle) handle = dlopen(kLlvmLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    errors += dlerror();
    *why = errors;
    return nullptr;
  }
  // Never closed: LLVM's global state lives as long as the process.
  auto entry = reinterpret_cast<LlvmBackendCreate>(dlsym(handle, "winnow_llvm_backend_create"));
  if (!entry) *why = std::string(kLlvmLibrary) + " has no winnow_llvm_backend_create";
  return entry;
}

}  // namespace

std::unique_ptr<Backend> make_llvm_backend() {
  static std::once_flag once;
  static LlvmBackendCreate entry = nullptr;
  static std::string why;
  std::call_once(once, [] { entry = load_entry(&why); });
  if (!entry)
    throw std::runtime_error("the llvm backend is not available: " + why +
                             " (build with LLVM 19: scripts/install-deps.sh, WINNOW_LLVM=ON)");
  Backend* b = entry(kLlvmBackendAbi);
  if (!b)
    throw std::runtime_error(std::string(kLlvmLibrary) + " was built for another winnow (interface " +
                             "version differs from " + std::to_string(kLlvmBackendAbi) + ")");
  return std::unique_ptr<Backend>(b);
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "nvrtc") return make_nvrtc_backend();
  if (name == "llvm") return make_llvm_backend();
  throw std::invalid_argument("backend must be " + std::string(kBackendChoices) + ", not '" +
                              std::string(name) + "'");
}

}  // namespace winnow::backend
