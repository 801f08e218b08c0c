// Helpers of the kernel cache tests: scoped environment, captured stderr, entry names.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kernel_cache.h"
#include "tests/support.h"

namespace winnow::cache_test {

using rt::CubinId;
using test::TempDir;
namespace fs = std::filesystem;

using test::ScopedEnv;

// Captures what is written to file descriptor 2 while alive.
struct StderrCapture {
  TempDir dir;
  int saved = -1;
  StderrCapture() {
    std::fflush(stderr);
    saved = ::dup(2);
    int fd = ::open((dir.path / "stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  std::string finish() {
    std::fflush(stderr);
    if (saved >= 0) {
      ::dup2(saved, 2);
      ::close(saved);
      saved = -1;
    }
    std::ifstream in(dir.path / "stderr.txt");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  ~StderrCapture() { finish(); }
};

inline int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) ++n;
    at = end + 1;
  }
  return n;
}

inline std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

inline const std::string kArch = "sm_90a";
inline const std::string kKey = std::string(64, 'a');
inline const std::string kBackend = "nvrtc 13.0";

inline CubinId id_of(const std::string& key, const std::string& arch = kArch) {
  return {arch, key, kBackend};
}
inline const CubinId kId = id_of(kKey);

inline fs::path entry_dir(const fs::path& root, const std::string& arch, const std::string& key) {
  return root / "v1" / arch / key;
}

}  // namespace winnow::cache_test
