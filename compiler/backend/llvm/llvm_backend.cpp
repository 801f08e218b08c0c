// The LLVM backend (libwinnow_llvm.so): the same generated CUDA source and templates as
// NVRTC, compiled by clang 19 in CUDA device mode to an optimised nvptx64 module, lowered to
// PTX by LLVM's NVPTX target, and PTX -> sm_90a cubin by nvJitLink. Loaded by
// make_llvm_backend() (compiler/backend/backend_select.cpp) only when asked for.
#include <llvm/IR/Module.h>

#include <chrono>

#include "compiler/backend/backend.h"
#include "compiler/backend/llvm/clang_device.h"
#include "compiler/backend/llvm/nvjitlink.h"

namespace winnow::backend::llvm_be {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A request this backend cannot serve, said before any work (no source is dumped).
void check_request(const CompileRequest& req) {
  // LLVM 19's NVPTX target knows sm_90a and nothing newer (no sm_100a).
  if (!(req.arch == Arch{9, 0, 'a'}))
    throw CompileError("the llvm backend compiles for sm_90a only, not " + req.arch.str() +
                           " (use the nvrtc backend)", "", "");
  // -D switches (WINNOW_NVRTC_OPTIONS' measurement switches) mean the same to clang.
  for (const std::string& o : req.options)
    if (o.rfind("-D", 0) != 0)
      throw CompileError("the llvm backend takes -D options only, not the NVRTC option '" + o +
                             "' (WINNOW_NVRTC_OPTIONS)", "", "");
}

class LlvmBackend final : public Backend {
 public:
  std::string name() const override { return "llvm"; }

  std::string version() const override {
    return "clang " + clang_version() + " nvJitLink " + nvjitlink_version();
  }

  CompileResult compile(const CompileRequest& req, bool emit_ptx) const override {
    check_request(req);
    CompileResult r;
    auto t0 = std::chrono::steady_clock::now();
    DeviceModule dm = compile_to_module(req);
    r.phase_ms.emplace_back("clang front end", ms_since(t0));
    r.log = dm.log;
    t0 = std::chrono::steady_clock::now();
    optimise(*dm.module, req);
    r.phase_ms.emplace_back("LLVM -O3", ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    std::string ptx = module_to_ptx(*dm.module, req);
    r.phase_ms.emplace_back("NVPTX (IR to PTX)", ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    std::string link_log;
    r.cubin = ptx_to_cubin(ptx, req, &link_log);
    r.phase_ms.emplace_back("nvJitLink (PTX to SASS)", ms_since(t0));
    if (!link_log.empty()) r.log += (r.log.empty() ? "" : "\n") + link_log;
    if (emit_ptx) r.ptx = std::move(ptx);
    return r;
  }

  std::string llvm_ir(const CompileRequest& req) const override {
    check_request(req);
    DeviceModule dm = compile_to_module(req);
    optimise(*dm.module, req);
    std::string text = module_text(*dm.module);
    module_to_ptx(*dm.module, req);  // clears NVPTX's annotation cache (clang_device.h)
    return text;
  }
};

}  // namespace
}  // namespace winnow::backend::llvm_be

// abi: the kLlvmBackendAbi of the caller; another value gets nullptr.
extern "C" __attribute__((visibility("default"))) winnow::backend::Backend*
winnow_llvm_backend_create(int abi) {
  if (abi != winnow::backend::kLlvmBackendAbi) return nullptr;
  return new winnow::backend::llvm_be::LlvmBackend();
}
