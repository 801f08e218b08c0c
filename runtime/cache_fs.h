// File-system steps of the disk cache. Each works relative to a folder already open and
// never goes through a symlink: anyone who could once write the cache folder may have
// planted links to other folders, devices or FIFOs, and the cache must not act on them.
#pragma once
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace winnow::rt::cache_fs {

// An owned file descriptor; -1 is none.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
 private:
  int fd_ = -1;
};

// What a name in a folder is, not following a symlink.
enum class Kind { Missing, Folder, Symlink, RegularFile, Other };
Kind kind_at(int parent, const std::string& name);
// "a symlink", "a regular file", ...: for messages.
const char* kind_words(Kind k);

// `path` opened as a folder, its last component not followed; none with errno set
// (ELOOP: a symlink, ENOTDIR: not a folder, ENOENT: missing).
Fd open_folder(const std::filesystem::path& path);
// `name` in `parent` opened as a folder, as open_folder.
Fd open_folder_at(int parent, const std::string& name);
// Creates `name` in `parent` (mode 0700) unless it exists, then open_folder_at.
Fd make_folder_at(int parent, const std::string& name, std::string* problem);
// Creates each missing component of `path`, mode 0700 (XDG's rule for ~/.cache). Parent
// components may be symlinks (a home folder on another disk); callers open the last one
// with open_folder, which does not follow it.
bool make_folders(const std::filesystem::path& path, std::string* problem);

// Why a cache folder or file is not to be trusted, or "": it must be owned by the
// effective user and not writable by group or others.
std::string distrust(const struct stat& st);

// The whole of `name` in `parent` when it is a trusted regular file of at most `limit`
// bytes; the size is checked before anything is read. Otherwise nullopt and `problem`
// says why (missing, a symlink, a FIFO or device, too big, owned by another user).
std::optional<std::string> read_bounded(int parent, const char* name, std::uintmax_t limit,
                                        std::string* problem);
// Creates `name` in `parent` (mode 0600; it must not exist) holding `data`.
bool write_new(int parent, const char* name, std::string_view data, std::string* problem);

// The names in an open folder, sorted, without "." and "..".
std::vector<std::string> names_in(int folder);

// Removes the folder `name` in `parent` when it is a real folder holding nothing but
// files with the `allowed` names: those are unlinked (a symlink among them loses only
// itself) and the folder removed. "" on success, else why it was left in place.
std::string remove_folder_of(int parent, const std::string& name,
                             std::initializer_list<const char*> allowed);

// strerror(err), thread-safe.
std::string errno_text(int err);

}  // namespace winnow::rt::cache_fs
