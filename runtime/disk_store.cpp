// The on-disk half of the kernel cache: <root>/v1/<arch>/<key>/{kernel.cubin, meta.txt}.
// Entries are written into a temporary folder and renamed into place, and every load
// checks what meta.txt records (key, arch, backend, size, SHA-256), so many processes can
// share a folder and a damaged or misplaced entry is only ever a miss. Every step goes
// through cache_fs: relative to an open folder, never through a symlink.
#include "runtime/disk_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>

#include "runtime/cache_fs.h"
#include "runtime/env.h"
#include "runtime/log.h"
#include "runtime/sha256.h"

namespace winnow::rt {

void cache_warning(std::string msg) { log(LogLevel::Warn, std::move(msg)); }

namespace {

namespace fs = std::filesystem;
using cache_fs::Fd;
using cache_fs::Kind;

constexpr const char* kSchemaDir = "v1";
constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kMetaFile = "meta.txt";
constexpr const char* kMetaMagic = "winnow-cache-entry v2";
// Entries of an older winnow: still recognised as entries (clear and verify --fix may
// remove them) but never loaded, since their meta.txt does not record the key.
constexpr const char* kOldMetaMagic = "winnow-cache-entry v1";
// Every transient folder (being written, or a bad entry moved aside) starts with this;
// scan() never shows them and clear()/verify() remove the ones a crash left behind.
constexpr const char* kTempPrefix = ".tmp-";
constexpr auto kStaleTempAge = std::chrono::hours(1);
constexpr std::size_t kMaxDescriptionBytes = 64 * 1024;

// Arch names become folder names: keep them to one plain path component.
bool is_plain_name(const std::string& s) {
  if (s.empty() || s.size() > 200 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '-' || c == '.';
  });
}

// A content key: SHA-256 in lower-case hex. Only such folders are ever entries.
bool is_key_name(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool is_temp(const std::string& name) { return name.rfind(kTempPrefix, 0) == 0; }

std::string random_suffix() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%d-%08x%08x", static_cast<int>(::getpid()), rd(), rd());
  return buf;
}

std::string short_key(const std::string& key) { return key.substr(0, 16) + "..."; }

struct Meta {
  bool old_format = false;  // kOldMetaMagic: nothing below is filled in
  std::string key, arch, backend;
  std::uintmax_t bytes = 0;
  std::string sha256;
  std::string description;  // the rest of the file: may span lines
};

std::string format_meta(const Meta& m) {
  return fmt::format("{}\nkey={}\narch={}\nbackend={}\nbytes={}\nsha256={}\ndescription={}",
                     kMetaMagic, m.key, m.arch, m.backend, m.bytes, m.sha256, m.description);
}

std::optional<Meta> parse_meta(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  Meta m;
  if (line == kOldMetaMagic) {
    m.old_format = true;
    return m;
  }
  if (line != kMetaMagic) return std::nullopt;
  auto field = [&](const char* name, std::string* out) {
    const std::string prefix = std::string(name) + "=";
    if (!std::getline(in, line) || line.rfind(prefix, 0) != 0) return false;
    *out = line.substr(prefix.size());
    return true;
  };
  std::string bytes;
  if (!field("key", &m.key) || !field("arch", &m.arch) || !field("backend", &m.backend) ||
      !field("bytes", &bytes) || !field("sha256", &m.sha256))
    return std::nullopt;
  if (bytes.empty() || bytes.size() > 19 ||
      bytes.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  m.bytes = std::stoull(bytes);
  const size_t at = text.find("\ndescription=");
  if (at == std::string::npos) return std::nullopt;
  m.description = text.substr(at + 13);
  return m;
}

// What a load expects an entry to record; a null backend is not checked (listing).
struct Expected {
  const std::string& arch;
  const std::string& key;
  const std::string* backend;
};

// The trusted folder `name` in `parent`: problem says why not (missing: *missing set).
Fd open_trusted_at(int parent, const std::string& name, std::string* problem, bool* missing) {
  Fd fd = cache_fs::open_folder_at(parent, name);
  if (!fd) {
    const int err = errno;
    *missing = err == ENOENT;
    *problem = err == ELOOP ? "is a symlink (not followed)" : cache_fs::errno_text(err);
    return {};
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    *problem = cache_fs::errno_text(errno);
    return {};
  }
  if (std::string why = cache_fs::distrust(st); !why.empty()) {
    *problem = "is " + why;
    return {};
  }
  return fd;
}

// The cubin of a whole entry that records what `want` names; otherwise nullopt and
// `problem` says why.
std::optional<std::string> read_entry(int entry, const Expected& want, std::string* problem,
                                      Meta* meta_out = nullptr) {
  auto meta_text = cache_fs::read_bounded(entry, kMetaFile, kMaxMetaBytes, problem);
  if (!meta_text) return std::nullopt;
  auto meta = parse_meta(*meta_text);
  if (!meta) {
    *problem = "meta.txt is malformed";
    return std::nullopt;
  }
  if (meta_out) *meta_out = *meta;
  if (meta->old_format) {
    *problem = "meta.txt was written by an older winnow and does not record the key";
    return std::nullopt;
  }
  if (meta->key != want.key) {
    *problem = fmt::format(
        "meta.txt records the key {}, not {} (an entry copied under another key?)",
                           short_key(meta->key), short_key(want.key));
    return std::nullopt;
  }
  if (meta->arch != want.arch) {
    *problem = fmt::format("meta.txt records the arch '{}', not '{}'", meta->arch, want.arch);
    return std::nullopt;
  }
  if (want.backend && meta->backend != *want.backend) {
    *problem = fmt::format("meta.txt records the backend '{}', not '{}'", meta->backend,
                           *want.backend);
    return std::nullopt;
  }
  auto cubin = cache_fs::read_bounded(entry, kCubinFile, kMaxCubinBytes, problem);
  if (!cubin) return std::nullopt;
  if (cubin->size() != meta->bytes) {
    *problem = fmt::format("kernel.cubin has {} bytes, meta.txt says {} (truncated?)",
                           cubin->size(), meta->bytes);
    return std::nullopt;
  }
  if (sha256_hex(*cubin) != meta->sha256) {
    *problem = "kernel.cubin does not match the sha256 in meta.txt (corrupted)";
    return std::nullopt;
  }
  return cubin;
}

// True when meta.txt of the entry folder is one winnow wrote (any version): only then is
// the folder removed as an entry.
bool has_winnow_meta(int entry) {
  std::string ignored;
  auto text = cache_fs::read_bounded(entry, kMetaFile, kMaxMetaBytes, &ignored);
  return text && parse_meta(*text).has_value();
}

std::string remove_entry(int arch, const std::string& name) {
  return cache_fs::remove_folder_of(arch, name, {kCubinFile, kMetaFile});
}

// An entry folder met while walking the cache, both folders open.
struct EntryAt {
  int arch_fd, entry_fd;
  const std::string &arch, &key;
  std::string path;
};

// Visits every entry under <root>/v1 without following a symlink at any level. What is
// not an entry (links, files, odd names) goes to `skipped`; temporary folders go to
// `on_temp`, when given.
using OnTemp = std::function<void(int arch_fd, const std::string& name, const std::string& path)>;
void walk(const fs::path& root, const std::function<void(const EntryAt&)>& on_entry,
          const OnTemp& on_temp, std::vector<DiskStore::Skipped>& skipped) {
  const std::string root_text = root.string();
  Fd root_fd = cache_fs::open_folder(root);
  if (!root_fd) {
    const int err = errno;
    if (err == ENOENT) return;
    skipped.push_back({root_text, err == ELOOP ? "the cache folder is a symlink (not followed)"
                                               : cache_fs::errno_text(err)});
    return;
  }
  // Why a name that should be a folder is not one; a symlink is never followed.
  auto not_a_folder = [](Kind kind, const char* expected) {
    return std::string(cache_fs::kind_words(kind)) +
           (kind == Kind::Symlink ? " (not followed)" : std::string(", not ") + expected);
  };
  const Kind schema = cache_fs::kind_at(root_fd.get(), kSchemaDir);
  if (schema == Kind::Missing) return;
  const std::string schema_path = root_text + "/" + kSchemaDir;
  if (schema != Kind::Folder) {
    skipped.push_back({schema_path, not_a_folder(schema, "the schema folder")});
    return;
  }
  Fd schema_fd = cache_fs::open_folder_at(root_fd.get(), kSchemaDir);
  if (!schema_fd) {
    skipped.push_back({schema_path, cache_fs::errno_text(errno)});
    return;
  }
  for (const std::string& arch : cache_fs::names_in(schema_fd.get())) {
    const std::string arch_path = schema_path + "/" + arch;
    const Kind arch_kind = cache_fs::kind_at(schema_fd.get(), arch);
    if (arch_kind != Kind::Folder) {
      skipped.push_back({arch_path, not_a_folder(arch_kind, "an arch folder")});
      continue;
    }
    if (!is_plain_name(arch)) {
      skipped.push_back({arch_path, "not an arch name"});
      continue;
    }
    Fd arch_fd = cache_fs::open_folder_at(schema_fd.get(), arch);
    if (!arch_fd) {
      skipped.push_back({arch_path, cache_fs::errno_text(errno)});
      continue;
    }
    for (const std::string& name : cache_fs::names_in(arch_fd.get())) {
      const std::string path = arch_path + "/" + name;
      if (is_temp(name)) {
        if (on_temp) on_temp(arch_fd.get(), name, path);
        continue;
      }
      const Kind kind = cache_fs::kind_at(arch_fd.get(), name);
      if (kind != Kind::Folder) {
        skipped.push_back({path, not_a_folder(kind, "an entry")});
        continue;
      }
      if (!is_key_name(name)) {
        skipped.push_back({path, "not named like a content key"});
        continue;
      }
      Fd entry_fd = cache_fs::open_folder_at(arch_fd.get(), name);
      if (!entry_fd) {
        skipped.push_back({path, cache_fs::errno_text(errno)});
        continue;
      }
      on_entry(EntryAt{arch_fd.get(), entry_fd.get(), arch, name, path});
    }
  }
}

// Temporary folders a crashed writer left behind; live writers finish within seconds.
void remove_if_stale(int arch_fd, const std::string& name, const std::string& path,
                     std::vector<DiskStore::Skipped>& skipped) {
  struct stat st;
  if (::fstatat(arch_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  const auto age = std::chrono::system_clock::now() -
                   std::chrono::system_clock::from_time_t(st.st_mtime);
  if (age < kStaleTempAge) return;
  if (std::string why = remove_entry(arch_fd, name); !why.empty())
    skipped.push_back({path, "a stale temporary folder, left in place: " + why});
}

}  // namespace

struct RootVerdict {
  std::atomic<bool> refused{false};
  std::mutex mu;
  std::string why;
};

DiskStore::DiskStore(std::filesystem::path root)
    : root_(std::move(root)), verdict_(std::make_shared<RootVerdict>()) {
  // "link/" would make the kernel follow the link even with O_NOFOLLOW.
  while (!root_.has_filename() && root_.has_parent_path() && root_ != root_.root_path())
    root_ = root_.parent_path();
}

std::optional<std::string> DiskStore::refusal() const {
  if (!verdict_->refused) return std::nullopt;
  std::lock_guard lock(verdict_->mu);
  return verdict_->why;
}

namespace {

// The root, open and trusted; none when it is missing (and not to be created) or refused.
// A refusal is remembered in `state` and warned about once.
Fd open_root(const fs::path& root, RootVerdict& state, bool create) {
  if (state.refused) return {};
  auto refuse = [&](const std::string& why) {
    std::lock_guard lock(state.mu);
    if (!state.refused.exchange(true)) {
      state.why = why;
      cache_warning(fmt::format("the kernel cache folder {} is not used ({}); kernels are compiled "
                                "and kept in memory only",
                                root.string(), why));
    }
    return Fd();
  };
  std::string problem;
  if (create && !cache_fs::make_folders(root, &problem)) return refuse(problem);
  Fd fd = cache_fs::open_folder(root);
  if (!fd) {
    const int err = errno;
    if (err == ENOENT && !create) return {};  // a cold cache is not worth a warning
    return refuse(err == ELOOP ? "it is a symlink; point WINNOW_CACHE_DIR at the folder itself"
                               : cache_fs::errno_text(err));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return refuse(cache_fs::errno_text(errno));
  if (std::string why = cache_fs::distrust(st); !why.empty()) return refuse("it is " + why);
  return fd;
}

bool valid_id(const CubinId& id) {
  return is_plain_name(id.arch) && is_key_name(id.key) &&
         id.backend.find('\n') == std::string::npos;
}

}  // namespace

std::optional<std::vector<char>> DiskStore::load(const CubinId& id) const {
  if (!valid_id(id)) {
    cache_warning("kernel cache lookup with an invalid arch or key ('" + id.arch + "', '" + id.key +
                  "')");
    return std::nullopt;
  }
  Fd root = open_root(root_, *verdict_, /*create=*/false);
  if (!root) return std::nullopt;
  const std::string path = (root_ / kSchemaDir / id.arch / id.key).string();
  auto unusable = [&](const std::string& what, const std::string& why) {
    cache_warning(
        fmt::format("kernel cache entry {} is unusable ({} {}); recompiling", path, what, why));
    return std::nullopt;
  };
  std::string problem;
  bool missing = false;
  // A missing folder at any level is a cold cache: a quiet miss.
  Fd schema = open_trusted_at(root.get(), kSchemaDir, &problem, &missing);
  if (!schema) return missing ? std::nullopt : unusable(kSchemaDir, problem);
  Fd arch = open_trusted_at(schema.get(), id.arch, &problem, &missing);
  if (!arch) return missing ? std::nullopt : unusable("its arch folder", problem);
  Fd entry = open_trusted_at(arch.get(), id.key, &problem, &missing);
  if (!entry) return missing ? std::nullopt : unusable("the entry folder", problem);
  auto cubin = read_entry(entry.get(), Expected{id.arch, id.key, &id.backend}, &problem);
  if (!cubin) {
    cache_warning("kernel cache entry " + path + " is unusable (" + problem + "); recompiling");
    return std::nullopt;
  }
  return std::vector<char>(cubin->begin(), cubin->end());
}

bool DiskStore::store(const CubinId& id, const std::vector<char>& cubin,
                      const std::string& description) const {
  auto fail = [&](const std::string& why) {
    cache_warning("cannot write kernel cache entry " + id.key + " under " + root_.string() + " (" +
                  why + "); the kernel stays in memory only");
    return false;
  };
  if (!valid_id(id)) return fail("invalid arch, key or backend");
  if (cubin.size() > kMaxCubinBytes)
    return fail(
        fmt::format("{} bytes is above the limit of {} bytes", cubin.size(), kMaxCubinBytes));
  Fd root = open_root(root_, *verdict_, /*create=*/true);
  if (!root) return false;  // refused, and warned about once
  std::string problem;
  Fd schema = cache_fs::make_folder_at(root.get(), kSchemaDir, &problem);
  Fd arch = schema ? cache_fs::make_folder_at(schema.get(), id.arch, &problem) : Fd();
  if (!arch) return fail(problem);
  struct stat st;
  for (int fd : {schema.get(), arch.get()}) {
    if (::fstat(fd, &st) != 0) return fail(cache_fs::errno_text(errno));
    if (std::string why = cache_fs::distrust(st); !why.empty()) return fail("a folder is " + why);
  }

  const std::string tmp = kTempPrefix + id.key + "-" + random_suffix();
  Fd tmp_fd = cache_fs::make_folder_at(arch.get(), tmp, &problem);
  if (!tmp_fd) return fail(problem);
  const std::string_view bytes(cubin.data(), cubin.size());
  // The description is for `cache ls` only: cut so that meta.txt stays far below its limit.
  Meta meta;
  meta.key = id.key;
  meta.arch = id.arch;
  meta.backend = id.backend;
  meta.bytes = cubin.size();
  meta.sha256 = sha256_hex(bytes);
  meta.description = description.substr(0, kMaxDescriptionBytes);
  if (!cache_fs::write_new(tmp_fd.get(), kCubinFile, bytes, &problem) ||
      !cache_fs::write_new(tmp_fd.get(), kMetaFile, format_meta(meta), &problem)) {
    remove_entry(arch.get(), tmp);
    return fail(problem);
  }
  tmp_fd = Fd();

  // rename() of a folder is atomic and refuses a non-empty target, so readers see a
  // whole entry or none, and the first writer of a key wins.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (::renameat(arch.get(), tmp.c_str(), arch.get(), id.key.c_str()) == 0) return true;
    const int err = errno;
    if (err != EEXIST && err != ENOTEMPTY) {
      remove_entry(arch.get(), tmp);
      return fail("rename: " + cache_fs::errno_text(err));
    }
    bool missing = false;
    if (Fd existing = open_trusted_at(arch.get(), id.key, &problem, &missing);
        existing && read_entry(existing.get(), Expected{id.arch, id.key, &id.backend}, &problem)) {
      remove_entry(arch.get(), tmp);  // another process stored it first
      return true;
    }
    // A damaged entry would be a miss forever: move it aside atomically and retry. What
    // is moved aside is removed only if it holds nothing but an entry's two files.
    const std::string aside = kTempPrefix + id.key + "-" + random_suffix() + "-old";
    if (::renameat(arch.get(), id.key.c_str(), arch.get(), aside.c_str()) == 0) {
      if (cache_fs::kind_at(arch.get(), aside) == Kind::Symlink)
        ::unlinkat(arch.get(), aside.c_str(), 0);  // the link itself, not what it names
      else
        remove_entry(arch.get(), aside);
    }
  }
  remove_entry(arch.get(), tmp);
  return fail("the existing entry kept changing");
}

bool DiskStore::evict(const CubinId& id) const {
  if (!valid_id(id)) return false;
  Fd root = open_root(root_, *verdict_, /*create=*/false);
  if (!root) return false;
  std::string problem;
  bool missing = false;
  Fd schema = open_trusted_at(root.get(), kSchemaDir, &problem, &missing);
  Fd arch = schema ? open_trusted_at(schema.get(), id.arch, &problem, &missing) : Fd();
  if (!arch) return false;
  if (cache_fs::kind_at(arch.get(), id.key) == Kind::Missing) return false;
  // Moved aside first, so other processes stop loading it at once.
  const std::string aside = kTempPrefix + id.key + "-" + random_suffix() + "-evicted";
  if (::renameat(arch.get(), id.key.c_str(), arch.get(), aside.c_str()) != 0) {
    cache_warning(fmt::format("cannot evict kernel cache entry {}: {}",
                              (root_ / kSchemaDir / id.arch / id.key).string(),
                              cache_fs::errno_text(errno)));
    return false;
  }
  if (std::string why = remove_entry(arch.get(), aside); !why.empty())
    cache_warning(fmt::format("evicted kernel cache entry {} is left in place as {} ({})",
                              id.key, aside, why));
  return true;
}

DiskStore::Listing DiskStore::scan() const {
  Listing out;
  walk(
      root_,
      [&](const EntryAt& at) {
        Entry e;
        e.arch = at.arch;
        e.key = at.key;
        Meta meta;
        std::string problem;
        e.valid = read_entry(at.entry_fd, Expected{at.arch, at.key, nullptr}, &problem, &meta)
                      .has_value();
        e.description = meta.description;
        struct stat st;
        if (::fstatat(at.entry_fd, kCubinFile, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
          e.bytes = static_cast<std::uintmax_t>(st.st_size);
        out.entries.push_back(std::move(e));
      },
      nullptr, out.skipped);
  return out;
}

DiskStore::Sweep DiskStore::clear() const {
  Sweep out;
  walk(
      root_,
      [&](const EntryAt& at) {
        if (!has_winnow_meta(at.entry_fd)) {
          out.skipped.push_back({at.path, "no meta.txt of winnow's: not known to be an entry"});
          return;
        }
        if (std::string why = remove_entry(at.arch_fd, at.key); !why.empty())
          out.skipped.push_back({at.path, "left in place: " + why});
        else
          ++out.removed;
      },
      [&](int arch_fd, const std::string& name, const std::string& path) {
        remove_if_stale(arch_fd, name, path, out.skipped);
      },
      out.skipped);
  return out;
}

DiskStore::Sweep DiskStore::verify(bool remove_bad) const {
  Sweep out;
  walk(
      root_,
      [&](const EntryAt& at) {
        std::string problem;
        if (read_entry(at.entry_fd, Expected{at.arch, at.key, nullptr}, &problem)) return;
        ++out.bad;
        if (!remove_bad) return;
        if (!has_winnow_meta(at.entry_fd)) {
          out.skipped.push_back({at.path, "bad (" + problem + ") and without a meta.txt of "
                                          "winnow's: left in place, remove it by hand"});
          return;
        }
        if (std::string why = remove_entry(at.arch_fd, at.key); !why.empty())
          out.skipped.push_back({at.path, "bad (" + problem + "), left in place: " + why});
        else
          ++out.removed;
      },
      [&](int arch_fd, const std::string& name, const std::string& path) {
        if (remove_bad) remove_if_stale(arch_fd, name, path, out.skipped);
      },
      out.skipped);
  return out;
}

}  // namespace winnow::rt
