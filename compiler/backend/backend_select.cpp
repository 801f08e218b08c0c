// Backend by name, and the LLVM backend loaded from its shared library at its first compile:
// the library and the tool start and compile with NVRTC where LLVM's libraries are absent,
// and cubins the llvm backend compiled elsewhere load from the disk cache.
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

// The module itself, loaded once per process. Throws CompileError saying why it cannot be.
const Backend& loaded_llvm_backend() {
  static std::once_flag once;
  static std::unique_ptr<Backend> backend;
  static std::string why;
  std::call_once(once, [] {
    LlvmBackendCreate entry = load_entry(&why);
    if (!entry) return;
    backend.reset(entry(kLlvmBackendAbi));
    if (!backend)
      why = std::string(kLlvmLibrary) + " was built for another winnow (interface version " +
            "differs from " + std::to_string(kLlvmBackendAbi) + ")";
  });
  if (!backend)
    throw CompileError("the llvm backend cannot be loaded: " + why +
                           " (LLVM 19's shared libraries and clang 19's resource folder are "
                           "needed where it compiles; scripts/install-deps.sh)",
                       "", "");
  return *backend;
}

#ifdef WINNOW_LLVM_VERSION
// The llvm backend as the cache sees it: its name and exact version are known without
// loading anything (CMake writes the version libwinnow_llvm.so is built with), so cubins
// from the disk cache load on a machine without LLVM; the module is loaded at the first
// compile, and refused if it reports another version.
class LazyLlvmBackend final : public Backend {
 public:
  std::string name() const override { return "llvm"; }
  std::string version() const override { return WINNOW_LLVM_VERSION; }
  CompileResult compile(const CompileRequest& req, bool emit_ptx) const override {
    return real().compile(req, emit_ptx);
  }
  std::string llvm_ir(const CompileRequest& req) const override { return real().llvm_ir(req); }
  void load() const override { (void)real(); }

 private:
  const Backend& real() const {
    const Backend& b = loaded_llvm_backend();
    if (b.version() != version())
      throw CompileError(std::string(kLlvmLibrary) + " is " + b.version() + ", this winnow was built for " +
                             version() + ": rebuild both together", "", "");
    return b;
  }
};
#endif

}  // namespace

std::unique_ptr<Backend> make_llvm_backend() {
#ifdef WINNOW_LLVM_VERSION
  return std::make_unique<LazyLlvmBackend>();
#else
  throw std::runtime_error(
      "the llvm backend is not available: this winnow was built without it (LLVM 19 and clang "
      "19 not found; scripts/install-deps.sh installs them, then configure with WINNOW_LLVM=ON)");
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "nvrtc") return make_nvrtc_backend();
  if (name == "llvm") return make_llvm_backend();
  throw std::invalid_argument("backend must be " + std::string(kBackendChoices) + ", not '" +
                              std::string(name) + "'");
}

}  // namespace winnow::backend
