// Memory, then disk, then the compiler: the miss path of the kernel cache.
#include <fmt/format.h>

#include "runtime/kernel_cache.h"

namespace winnow::rt {
namespace {

// The content key already names the arch; it is kept in the memory key as well so a
// caller that reuses a key across arches cannot get the other arch's cubin.
std::string memory_key(const CubinId& id) { return id.arch + "/" + id.key; }

}  // namespace

CubinCache::CubinCache(std::optional<DiskStore> disk) : disk_(std::move(disk)) {}

std::optional<CubinCache::Result> CubinCache::find(const CubinId& id) {
  const std::string mkey = memory_key(id);
  {
    std::shared_lock lock(mu_);
    if (auto it = memory_.find(mkey); it != memory_.end())
      return Result{it->second.cubin, Result::From::Memory};
  }
  // No lock while reading the disk (or, in get(), compiling): two threads that miss
  // together may both compile, and they produce the same bytes.
  std::optional<std::vector<char>> from_disk;
  if (disk_) from_disk = disk_->load(id);
  if (!from_disk) return std::nullopt;
  std::unique_lock lock(mu_);
  memory_.emplace(mkey, Held{*from_disk, true});
  return Result{std::move(*from_disk), Result::From::Disk};
}

CubinCache::Result CubinCache::get(const CubinId& id, const std::string& description,
                                   const Compile& compile) {
  if (auto found = find(id)) return std::move(*found);
  Result result{compile(), Result::From::Compiled};
  if (disk_) disk_->store(id, result.cubin, description);  // false: memory only
  std::unique_lock lock(mu_);
  memory_.emplace(memory_key(id), Held{result.cubin, false});
  return result;
}

std::optional<std::vector<char>> CubinCache::replace_refused(const CubinId& id,
                                                             const std::vector<char>& refused,
                                                             const std::string& why,
                                                             const std::string& description,
                                                             const Compile& compile) {
  const std::string mkey = memory_key(id);
  {
    std::shared_lock lock(mu_);
    auto it = memory_.find(mkey);
    if (it == memory_.end()) return std::nullopt;  // not a cubin of this cache
    if (it->second.cubin != refused) return it->second.cubin;  // replaced already
    if (!it->second.from_disk) return std::nullopt;  // compiled here: the error is real
  }
  cache_warning(fmt::format("the driver refused the cached kernel {}/{} ({}); evicting it and "
                            "recompiling",
                            id.arch, id.key.substr(0, 16), why));
  if (disk_) disk_->evict(id);
  std::vector<char> fresh = compile();
  if (disk_) disk_->store(id, fresh, description);  // false: memory only
  std::unique_lock lock(mu_);
  memory_[mkey] = Held{fresh, false};
  return fresh;
}

}  // namespace winnow::rt
