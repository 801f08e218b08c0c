// The on-disk half of the kernel cache: <root>/v1/<arch>/<key>/{kernel.cubin, meta.txt}.
// Entries are written into a temporary folder and renamed into place, and every load
// checks the size and SHA-256 recorded in meta.txt, so many processes can share a folder
// and a damaged entry is only ever a miss.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "runtime/env.h"
#include "runtime/kernel_cache.h"
#include "runtime/sha256.h"

namespace winnow::rt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSchemaDir = "v1";
constexpr const char* kCubinFile = "kernel.cubin";
constexpr const char* kMetaFile = "meta.txt";
constexpr const char* kMetaMagic = "winnow-cache-entry v1";
// Every transient folder (being written, or a bad entry moved aside) starts with this;
// list() never shows them and clear()/verify() remove the ones a crash left behind.
constexpr const char* kTempPrefix = ".tmp-";
constexpr auto kStaleTempAge = std::chrono::hours(1);

// One line per problem, written in one call so lines of concurrent processes do not mix.
void warn(std::string msg) {
  if (auto level = env_get("WINNOW_LOG_LEVEL"); level && *level == "error") return;
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  std::string line = "winnow: warning: " + msg + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// Arch and key become folder names: keep them to one plain path component.
bool is_plain_name(const std::string& s) {
  if (s.empty() || s.size() > 200 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string random_suffix() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%d-%08x%08x", static_cast<int>(::getpid()), rd(), rd());
  return buf;
}

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return data;
}

bool write_file(const fs::path& p, std::string_view data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  return !out.fail();
}

struct Meta {
  std::uintmax_t bytes = 0;
  std::string sha256;
  std::string description;  // the rest of the file: may span lines
};

std::string format_meta(const Meta& m) {
  return std::string(kMetaMagic) + "\nbytes=" + std::to_string(m.bytes) + "\nsha256=" + m.sha256 +
         "\ndescription=" + m.description;
}

std::optional<Meta> parse_meta(const std::string& text) {
  std::istringstream in(text);
  std::string magic, bytes, sha;
  if (!std::getline(in, magic) || magic != kMetaMagic) return std::nullopt;
  if (!std::getline(in, bytes) || bytes.rfind("bytes=", 0) != 0) return std::nullopt;
  if (!std::getline(in, sha) || sha.rfind("sha256=", 0) != 0) return std::nullopt;
  Meta m;
  try {
    size_t used = 0;
    m.bytes = std::stoull(bytes.substr(6), &used);
    if (used != bytes.size() - 6) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  m.sha256 = sha.substr(7);
  size_t at = text.find("\ndescription=");
  if (at == std::string::npos) return std::nullopt;
  m.description = text.substr(at + 13);
  return m;
}

// The cubin of a whole, matching entry; otherwise nullopt and `problem` says why.
std::optional<std::string> read_entry(const fs::path& dir, std::string* problem,
                                      Meta* meta_out = nullptr) {
  auto meta_text = read_file(dir / kMetaFile);
  if (!meta_text) {
    *problem = "meta.txt is missing or unreadable";
    return std::nullopt;
  }
  auto meta = parse_meta(*meta_text);
  if (!meta) {
    *problem = "meta.txt is malformed";
    return std::nullopt;
  }
  if (meta_out) *meta_out = *meta;
  auto cubin = read_file(dir / kCubinFile);
  if (!cubin) {
    *problem = "kernel.cubin is missing or unreadable";
    return std::nullopt;
  }
  if (cubin->size() != meta->bytes) {
    *problem = "kernel.cubin has " + std::to_string(cubin->size()) + " bytes, meta.txt says " +
               std::to_string(meta->bytes) + " (truncated?)";
    return std::nullopt;
  }
  if (sha256_hex(*cubin) != meta->sha256) {
    *problem = "kernel.cubin does not match the sha256 in meta.txt (corrupted)";
    return std::nullopt;
  }
  return cubin;
}

// Sub-folders of `dir`, sorted; none when `dir` cannot be read.
std::vector<fs::path> subdirs(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

bool is_temp(const fs::path& p) { return p.filename().string().rfind(kTempPrefix, 0) == 0; }

// Temporary folders a crashed writer left behind; live writers finish within seconds.
void remove_stale_temps(const fs::path& root) {
  auto now = fs::file_time_type::clock::now();
  for (const fs::path& arch : subdirs(root / kSchemaDir))
    for (const fs::path& p : subdirs(arch)) {
      std::error_code ec;
      if (!is_temp(p)) continue;
      auto mtime = fs::last_write_time(p, ec);
      if (!ec && now - mtime > kStaleTempAge) fs::remove_all(p, ec);
    }
}

}  // namespace

DiskStore::DiskStore(std::filesystem::path root) : root_(std::move(root)) {}

std::optional<std::vector<char>> DiskStore::load(const std::string& arch,
                                                 const std::string& key) const {
  if (!is_plain_name(arch) || !is_plain_name(key)) {
    warn("kernel cache lookup with an invalid arch or key ('" + arch + "', '" + key + "')");
    return std::nullopt;
  }
  fs::path dir = root_ / kSchemaDir / arch / key;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::nullopt;  // a cold cache is not worth a warning
  std::string problem;
  auto cubin = read_entry(dir, &problem);
  if (!cubin) {
    warn("kernel cache entry " + dir.string() + " is unusable (" + problem + "); recompiling");
    return std::nullopt;
  }
  return std::vector<char>(cubin->begin(), cubin->end());
}

bool DiskStore::store(const std::string& arch, const std::string& key,
                      const std::vector<char>& cubin, const std::string& description) const {
  auto fail = [&](const std::string& why) {
    warn("cannot write kernel cache entry " + key + " under " + root_.string() + " (" + why +
         "); the kernel stays in memory only");
    return false;
  };
  if (!is_plain_name(arch) || !is_plain_name(key)) return fail("invalid arch or key");
  const fs::path arch_dir = root_ / kSchemaDir / arch;
  const fs::path final_dir = arch_dir / key;
  std::error_code ec;
  fs::create_directories(arch_dir, ec);
  if (ec) return fail(ec.message());

  const fs::path tmp = arch_dir / (kTempPrefix + key + "-" + random_suffix());
  if (!fs::create_directory(tmp, ec) || ec)
    return fail(ec ? ec.message() : "temporary folder exists");
  std::string_view bytes(cubin.data(), cubin.size());
  Meta meta{cubin.size(), sha256_hex(bytes), description};
  if (!write_file(tmp / kCubinFile, bytes) || !write_file(tmp / kMetaFile, format_meta(meta))) {
    fs::remove_all(tmp, ec);
    return fail("writing into " + tmp.string() + " failed");
  }

  // rename() of a folder is atomic and refuses a non-empty target, so readers see a
  // whole entry or none, and the first writer of a key wins.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (::rename(tmp.c_str(), final_dir.c_str()) == 0) return true;
    int err = errno;
    if (err != EEXIST && err != ENOTEMPTY) {
      fs::remove_all(tmp, ec);
      return fail(std::string("rename: ") + std::strerror(err));
    }
    std::string problem;
    if (read_entry(final_dir, &problem)) {  // another process stored it first
      fs::remove_all(tmp, ec);
      return true;
    }
    // A damaged entry would be a miss forever: move it aside atomically and retry.
    const fs::path aside = arch_dir / (kTempPrefix + key + "-" + random_suffix() + "-old");
    if (::rename(final_dir.c_str(), aside.c_str()) == 0) fs::remove_all(aside, ec);
  }
  fs::remove_all(tmp, ec);
  return fail("the existing entry kept changing");
}

std::vector<DiskStore::Entry> DiskStore::list() const {
  std::vector<Entry> out;
  for (const fs::path& arch : subdirs(root_ / kSchemaDir)) {
    if (is_temp(arch)) continue;
    for (const fs::path& dir : subdirs(arch)) {
      if (is_temp(dir)) continue;
      Entry e;
      e.arch = arch.filename().string();
      e.key = dir.filename().string();
      Meta meta;
      std::string problem;
      auto cubin = read_entry(dir, &problem, &meta);
      e.valid = cubin.has_value();
      e.description = meta.description;
      std::error_code ec;
      auto size = fs::file_size(dir / kCubinFile, ec);
      e.bytes = ec ? 0 : size;
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::size_t DiskStore::clear() const {
  std::size_t removed = 0;
  for (const Entry& e : list()) {
    std::error_code ec;
    if (fs::remove_all(root_ / kSchemaDir / e.arch / e.key, ec) > 0 && !ec) ++removed;
  }
  remove_stale_temps(root_);
  return removed;
}

std::size_t DiskStore::verify(bool remove_bad) const {
  std::size_t bad = 0;
  for (const Entry& e : list()) {
    if (e.valid) continue;
    ++bad;
    std::error_code ec;
    if (remove_bad) fs::remove_all(root_ / kSchemaDir / e.arch / e.key, ec);
  }
  if (remove_bad) remove_stale_temps(root_);
  return bad;
}

}  // namespace winnow::rt
