// clang's CUDA headers (the wrappers and builtin headers of its resource folder that a
// device compile includes), embedded into libwinnow_llvm.so at build time
// (cmake/embed_files.cmake, from the clang the module is built with): the module compiles
// without clang's resource folder on the machine, only the CUDA toolkit and the system's
// C and C++ headers. Names are relative to the resource folder's include/.
#pragma once
#include <span>

#include "compiler/codegen/embedded_templates.h"

namespace winnow::backend::llvm_be {

std::span<const codegen::EmbeddedTemplate> clang_cuda_headers();

}  // namespace winnow::backend::llvm_be
