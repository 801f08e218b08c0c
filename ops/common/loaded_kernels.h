// Loaded modules shared by every plan of one context: two plans whose content keys are
// equal use one module (one cuModuleLoadData), looked up under a read-mostly lock.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "runtime/cuda_driver.h"

namespace winnow::ops {

std::shared_ptr<const rt::LoadedKernel> loaded_kernel(
    const rt::Context& ctx, const std::string& content_key,
    const std::function<std::shared_ptr<const rt::LoadedKernel>()>& load);

}  // namespace winnow::ops
