#include "ops/common/backend_choice.h"

#include <string>

#include "ops/common/errors.h"
#include "runtime/env.h"

namespace winnow::ops {

std::unique_ptr<backend::Backend> choose_backend(const char* requested) {
  std::string name = requested ? requested : "";
  std::string from = "backend";
  if (name.empty()) {
    name = rt::env_get("WINNOW_BACKEND").value_or("");
    from = "WINNOW_BACKEND";
  }
  if (name.empty()) name = "nvrtc";
  if (name != "nvrtc" && name != "llvm")
    throw InvalidArgument(from + " must be " + backend::kBackendChoices + ", not '" + name + "'");
  try {
    return backend::make_backend(name);
  } catch (const std::runtime_error& e) {
    throw NotSupported(e.what());
  }
}

}  // namespace winnow::ops
