#include "runtime/cache_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace winnow::rt::cache_fs {
namespace {

constexpr int kFolderFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Kind kind_at(int parent, const std::string& name) {
  struct stat st;
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Kind::Missing;
  if (S_ISLNK(st.st_mode)) return Kind::Symlink;
  if (S_ISDIR(st.st_mode)) return Kind::Folder;
  if (S_ISREG(st.st_mode)) return Kind::RegularFile;
  return Kind::Other;
}

const char* kind_words(Kind k) {
  switch (k) {
    case Kind::Missing: return "missing";
    case Kind::Folder: return "a folder";
    case Kind::Symlink: return "a symlink";
    case Kind::RegularFile: return "a regular file";
    case Kind::Other: return "a FIFO, socket or device";
  }
  return "unknown";
}

Fd open_folder_at(int parent, const std::string& name) {
  Fd fd(::openat(parent, name.c_str(), kFolderFlags));
  // With O_DIRECTORY, Linux says ENOTDIR for a symlink: say ELOOP, as documented.
  if (!fd && errno == ENOTDIR && kind_at(parent, name) == Kind::Symlink) errno = ELOOP;
  return fd;
}

Fd open_folder(const std::filesystem::path& path) {
  return open_folder_at(AT_FDCWD, path.string());
}

Fd make_folder_at(int parent, const std::string& name, std::string* problem) {
  if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
    *problem = "cannot create " + name + ": " + errno_text(errno);
    return {};
  }
  Fd fd = open_folder_at(parent, name);
  if (!fd) {
    const int err = errno;
    *problem = name + (err == ELOOP ? " is a symlink (not followed)" : ": " + errno_text(err));
  }
  return fd;
}

bool make_folders(const std::filesystem::path& path, std::string* problem) {
  std::filesystem::path partial;
  for (const auto& part : path) {
    partial /= part;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      *problem = "cannot create " + partial.string() + ": " + errno_text(errno);
      return false;
    }
  }
  return true;
}

std::string distrust(const struct stat& st) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    return fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("writable by group or others (mode {:04o})", st.st_mode & 07777);
  return {};
}

std::optional<std::string> read_bounded(int parent, const char* name, std::uintmax_t limit,
                                        std::string* problem) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a link to
  // /dev/zero or another user's file is refused, not read.
  Fd fd(::openat(parent, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    if (err == ENOENT)
      *problem = fmt::format("{} is missing", name);
    else if (err == ELOOP)
      *problem = fmt::format("{} is a symlink (not followed)", name);
    else
      *problem = fmt::format("{} is unreadable: {}", name, errno_text(err));
    return std::nullopt;
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    *problem = fmt::format("{} is unreadable: {}", name, errno_text(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    *problem = fmt::format("{} is not a regular file (a FIFO, device or folder)", name);
    return std::nullopt;
  }
  if (std::string why = distrust(st); !why.empty()) {
    *problem = fmt::format("{} is {}", name, why);
    return std::nullopt;
  }
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  if (size > limit) {
    *problem = fmt::format("{} has {} bytes, above the limit of {} bytes", name, size, limit);
    return std::nullopt;
  }
  // Read at most the size fstat gave: a file that grows meanwhile shows up as a size
  // mismatch against meta.txt, never as an unbounded read.
  std::string data(size, '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *problem = fmt::format("{} is unreadable: {}", name, errno_text(errno));
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

bool write_new(int parent, const char* name, std::string_view data, std::string* problem) {
  Fd fd(::openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    *problem = fmt::format("cannot create {}: {}", name, errno_text(errno));
    return false;
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *problem = fmt::format("cannot write {}: {}", name, errno_text(errno));
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::vector<std::string> names_in(int folder) {
  std::vector<std::string> out;
  // fdopendir takes the descriptor over: give it a copy.
  const int copy = ::fcntl(folder, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return out;
  DIR* dir = ::fdopendir(copy);
  if (!dir) {
    ::close(copy);
    return out;
  }
  ::rewinddir(dir);
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::string remove_folder_of(int parent, const std::string& name,
                             std::initializer_list<const char*> allowed) {
  const Kind kind = kind_at(parent, name);
  if (kind != Kind::Folder) return fmt::format("it is {}", kind_words(kind));
  Fd folder = open_folder_at(parent, name);
  if (!folder) return "cannot open it: " + errno_text(errno);
  const auto is_allowed = [&](const std::string& n) {
    return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return n == a; });
  };
  // Look before removing anything, so a folder with other contents is left whole.
  for (const std::string& n : names_in(folder.get())) {
    if (!is_allowed(n)) return fmt::format("it holds '{}', which a cache entry never does", n);
    const Kind k = kind_at(folder.get(), n);
    if (k != Kind::RegularFile && k != Kind::Symlink)
      return fmt::format("its {} is {}", n, kind_words(k));
  }
  for (const char* n : allowed)
    if (::unlinkat(folder.get(), n, 0) != 0 && errno != ENOENT)
      return fmt::format("cannot remove its {}: {}", n, errno_text(errno));
  // Removes only an empty folder: if `name` was swapped meanwhile, nothing else goes.
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0)
    return "cannot remove it: " + errno_text(errno);
  return {};
}

std::string errno_text(int err) {
  char buf[256];
  // The GNU strerror_r returns the text (maybe not in buf).
  return ::strerror_r(err, buf, sizeof(buf));
}

}  // namespace winnow::rt::cache_fs
