#include "ops/common/loaded_kernels.h"

#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace winnow::ops {

std::shared_ptr<const rt::LoadedKernel> loaded_kernel(
    const rt::Context& ctx, const std::string& content_key,
    const std::function<std::shared_ptr<const rt::LoadedKernel>()>& load) {
  // Weak entries: a module is unloaded when its last plan goes (or its context does).
  static std::shared_mutex mu;
  static std::map<std::pair<const rt::Context*, std::string>, std::weak_ptr<const rt::LoadedKernel>>
      table;
  const auto key = std::make_pair(&ctx, content_key);
  {
    std::shared_lock lock(mu);
    auto it = table.find(key);
    if (it != table.end()) {
      if (auto k = it->second.lock()) return k;
    }
  }
  std::unique_lock lock(mu);
  auto& slot = table[key];
  if (auto k = slot.lock()) return k;
  auto k = load();
  slot = k;
  return k;
}

}  // namespace winnow::ops
