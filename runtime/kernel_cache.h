// The kernel cache (docs/design.md, Cache): a content key (SHA-256) -> an on-disk folder
// of cubins, shared by many processes; a miss compiles through a callback, so the
// runtime never depends on the compiler.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/disk_store.h"

namespace winnow::rt {

// Everything that decides the bytes of a cubin. Hashed in a fixed order.
struct ContentKeyInputs {
  int schema_version = 1;
  std::string build_id;         // winnow commit
  std::string template_hashes;  // "name=sha256\n" per embedded template, sorted
  std::string backend;          // "nvrtc 13.0"
  std::string arch;             // "sm_90a"
  std::string options;          // sorted compiler options
  std::string program;          // canonical IR + plan text
};
// SHA-256 (hex) over the inputs plus cache_relevant_env().
std::string content_key(const ContentKeyInputs& in);

// $WINNOW_CACHE_DIR, else $XDG_CACHE_HOME/winnow, else ~/.cache/winnow, else (no HOME)
// $TMPDIR/winnow-cache-<uid> (TMPDIR defaults to /tmp). DiskStore checks its trust.
std::filesystem::path default_cache_dir();

// In-memory content key -> cubin, then disk, then compile. Thread-safe.
class CubinCache {
 public:
  explicit CubinCache(std::optional<DiskStore> disk);
  struct Result {
    std::vector<char> cubin;
    enum class From { Memory, Disk, Compiled } from;
  };
  using Compile = std::function<std::vector<char>()>;
  Result get(const CubinId& id, const std::string& description, const Compile& compile);
  // get() without the compiler: the cubin from memory or disk, or nullopt on a miss.
  std::optional<Result> find(const CubinId& id);
  // The driver refused `refused`, a cubin get() gave for `id`. When it came from disk
  // (a cubin that passed every check but is still bad for this driver) the entry is
  // evicted from memory and disk with one warning and compiled again, and the new cubin
  // is returned; when get() has already replaced it, the replacement is returned without
  // compiling. nullopt when `refused` was compiled in this process: a real error.
  std::optional<std::vector<char>> replace_refused(const CubinId& id,
                                                   const std::vector<char>& refused,
                                                   const std::string& why,
                                                   const std::string& description,
                                                   const Compile& compile);
  const DiskStore* disk() const { return disk_ ? &*disk_ : nullptr; }
 private:
  struct Held {
    std::vector<char> cubin;
    bool from_disk = false;  // not yet proven loadable
  };
  std::optional<DiskStore> disk_;
  std::shared_mutex mu_;
  std::unordered_map<std::string, Held> memory_;
};

}  // namespace winnow::rt
