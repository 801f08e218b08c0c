// The LLVM backend's front half: generated CUDA source + in-memory headers -> an optimised
// LLVM module for nvptx64 (clang 19 as a library, CUDA device mode), and that module -> PTX
// (LLVM's NVPTX target). Part of libwinnow_llvm.so only.
#pragma once
#include <memory>
#include <string>

#include "compiler/backend/backend.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace winnow::backend::llvm_be {

struct DeviceModule {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  std::string log;  // clang's warnings
};

// Parses and checks the request's source (clang's front end, -ffp-contract=off) into an
// unoptimised module whose kernels' parameters are marked grid_constant. Throws
// CompileError with clang's diagnostics.
DeviceModule compile_to_module(const CompileRequest& req);

// LLVM's -O3 pipeline for the NVPTX target machine of req.arch.
void optimise(llvm::Module& m, const CompileRequest& req);

std::string module_text(const llvm::Module& m);

// The module's PTX for req.arch (sm_90a). Throws CompileError. Every optimised module
// must come through here before it is destroyed: NVPTX caches each module's annotations
// by address and forgets them only at the end of code generation.
std::string module_to_ptx(llvm::Module& m, const CompileRequest& req);

std::string clang_version();  // e.g. "19.1.7"

}  // namespace winnow::backend::llvm_be
