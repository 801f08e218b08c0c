// The on-disk half of the kernel cache, shared by many processes, and a code-loading
// surface: whatever it loads runs on the GPU. So it loads only from a root that this user
// owns and nobody else can write, checks each entry's recorded key against the lookup,
// bounds every read and never follows a symlink.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace winnow::rt {

// One line on stderr, "winnow: warning: ...", unless WINNOW_LOG_LEVEL=error
// (runtime/log.h).
void cache_warning(std::string msg);

// One cubin in the cache: its content key with the arch and backend it was keyed on.
struct CubinId {
  std::string arch;     // "sm_90a"; also a folder name
  std::string key;      // content_key(): 64 hex digits; the entry's folder name
  std::string backend;  // "nvrtc 13.0"
};

// The largest files an entry may have. A bigger one is refused unread (a cubin of
// winnow's is well below 1 MiB; meta.txt is a few lines and the description).
inline constexpr std::uintmax_t kMaxCubinBytes = std::uintmax_t(64) << 20;  // 64 MiB
inline constexpr std::uintmax_t kMaxMetaBytes = std::uintmax_t(1) << 20;    // 1 MiB

// What a DiskStore found out about its root, shared by its copies (one warning each).
struct RootVerdict;

// Layout: <root>/v1/<arch>/<key>/{kernel.cubin, meta.txt}, folders 0700 and files 0600.
// An entry is written into a temporary folder and renamed into place, so readers see
// whole entries or none. meta.txt records key, arch, backend, size and SHA-256 of the
// cubin; a load checks all of them.
//
// Trust: the root must be a folder (not a symlink) owned by the effective user and not
// writable by group or others; otherwise the store warns once and does nothing (load
// misses, store refuses), so the caller compiles in memory. Every folder and file below
// the root is held to the same rule.
class DiskStore {
 public:
  explicit DiskStore(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }
  // A missing, damaged, untrusted or mismatched entry is a miss (one warning on stderr),
  // never a throw.
  std::optional<std::vector<char>> load(const CubinId& id) const;
  // False (with a warning) when the folder cannot or may not be written: the caller still
  // has the cubin in memory. Concurrent stores of one key leave one valid entry.
  bool store(const CubinId& id, const std::vector<char>& cubin,
             const std::string& description) const;
  // Removes the entry of `id` (one the driver refused); false when none was removed.
  bool evict(const CubinId& id) const;

  struct Entry {
    std::string arch, key, description;
    std::uintmax_t bytes = 0;
    bool valid = false;
  };
  // Something in the cache folder that is not an entry and was left alone.
  struct Skipped {
    std::string path, why;
  };
  struct Listing {
    std::vector<Entry> entries;  // every key-named folder, valid or not
    std::vector<Skipped> skipped;
  };
  Listing scan() const;
  std::vector<Entry> list() const { return scan().entries; }
  // What clear() and verify() did. They remove only folders that are entries (a
  // key-shaped name, a meta.txt of winnow's, nothing but kernel.cubin and meta.txt in
  // them) and report everything else, symlinks included, as skipped.
  struct Sweep {
    std::size_t removed = 0;
    std::size_t bad = 0;  // verify: entries that would not load
    std::vector<Skipped> skipped;
  };
  Sweep clear() const;
  Sweep verify(bool remove_bad) const;

  // Why this root is not used, once a load or store found out; nullopt otherwise.
  std::optional<std::string> refusal() const;

 private:
  std::filesystem::path root_;
  std::shared_ptr<RootVerdict> verdict_;
};

}  // namespace winnow::rt
