// PTX -> cubin with nvJitLink from the CUDA toolkit (no GPU or driver needed).
#pragma once
#include <string>
#include <vector>

#include "compiler/backend/backend.h"

namespace winnow::backend::llvm_be {

// Throws CompileError with nvJitLink's error log.
std::vector<char> ptx_to_cubin(const std::string& ptx, const CompileRequest& req,
                               std::string* info_log);

std::string nvjitlink_version();  // e.g. "13.0"

}  // namespace winnow::backend::llvm_be
