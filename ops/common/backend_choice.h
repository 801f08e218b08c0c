// Which backend compiles a context's kernels: the caller's choice, else $WINNOW_BACKEND,
// else NVRTC.
#pragma once
#include <memory>

#include "compiler/backend/backend.h"

namespace winnow::ops {

// requested: "nvrtc", "llvm", or nullptr / "" for $WINNOW_BACKEND (unset or empty: nvrtc).
// Throws InvalidArgument for another name, NotSupported when the llvm backend cannot be
// loaded (the reason in the message).
std::unique_ptr<backend::Backend> choose_backend(const char* requested);

}  // namespace winnow::ops
