// The kernel cache of DESIGN.md section 5: a content key (SHA-256) -> an on-disk folder
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

// $WINNOW_CACHE_DIR, else $XDG_CACHE_HOME/winnow, else ~/.cache/winnow.
std::filesystem::path default_cache_dir();

// Layout: <root>/v1/<arch>/<key>/{kernel.cubin, meta.txt}. An entry is written into a
// temporary folder and renamed into place, so readers see whole entries or none.
class DiskStore {
 public:
  explicit DiskStore(std::filesystem::path root);
  const std::filesystem::path& root() const { return root_; }
  // A missing, truncated or mismatched entry is a miss (warning on stderr), never a throw.
  std::optional<std::vector<char>> load(const std::string& arch, const std::string& key) const;
  // False (with a warning) when the folder cannot be written: the caller still has the
  // cubin in memory. Concurrent stores of one key leave one valid entry.
  bool store(const std::string& arch, const std::string& key, const std::vector<char>& cubin,
             const std::string& description) const;
  struct Entry {
    std::string arch, key, description;
    std::uintmax_t bytes = 0;
    bool valid = false;
  };
  std::vector<Entry> list() const;   // every entry, valid or not
  std::size_t clear() const;         // removes entries; returns how many
  std::size_t verify(bool remove_bad) const;  // returns the number of bad entries
 private:
  std::filesystem::path root_;
};

// In-memory content key -> cubin, then disk, then compile. Thread-safe.
class CubinCache {
 public:
  explicit CubinCache(std::optional<DiskStore> disk);
  struct Result {
    std::vector<char> cubin;
    enum class From { Memory, Disk, Compiled } from;
  };
  Result get(const std::string& arch, const std::string& key, const std::string& description,
             const std::function<std::vector<char>()>& compile);
  const DiskStore* disk() const { return disk_ ? &*disk_ : nullptr; }
 private:
  std::optional<DiskStore> disk_;
  std::shared_mutex mu_;
  std::unordered_map<std::string, std::vector<char>> memory_;
};

}  // namespace winnow::rt
