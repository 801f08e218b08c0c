// Helpers shared by the tests.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "ops/common/backend_choice.h"
#include "ops/common/errors.h"
#include "runtime/cuda_driver.h"

namespace winnow::test {

// Sets (or unsets) one variable for a scope and restores the old value after.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {  // value null: unset
    if (const char* v = std::getenv(n)) old = v;
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ScopedEnv(const char* n, const std::string& value) : ScopedEnv(n, value.c_str()) {}
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

// [gpu] tests start with this. With no GPU it prints WINNOW_SKIP (ctest reports the test
// as skipped, never as passed) and returns true: the test then returns.
inline bool skip_without_gpu() {
  std::string why;
  if (winnow::rt::gpu_available(&why)) return false;
  WARN("WINNOW_SKIP: no CUDA device (" << why << ")");
  return true;
}
#define WINNOW_REQUIRE_GPU()                          \
  do {                                                \
    if (::winnow::test::skip_without_gpu()) return;  \
  } while (0)

// A [gpu] test that compiles into a cache folder of its own (not WINNOW_CACHE_DIR) checks
// this after WINNOW_REQUIRE_GPU: under WINNOW_BACKEND=llvm where libwinnow_llvm.so cannot
// load (a GPU machine without LLVM's libraries and without the static module, running the
// llvm suite from a cache filled elsewhere) nothing compiles, so it says why and returns.
inline bool skip_without_backend() {
  try {
    winnow::ops::choose_backend(nullptr)->load();
    return false;
  } catch (const winnow::ops::NotSupported& e) {
    WARN("WINNOW_SKIP: this test compiles into its own cache folder, and " << e.what());
    return true;
  } catch (const winnow::backend::CompileError& e) {  // built, but its module cannot load here
    WARN("WINNOW_SKIP: this test compiles into its own cache folder, and " << e.what());
    return true;
  }
}
#define WINNOW_REQUIRE_BACKEND()                         \
  do {                                                   \
    if (::winnow::test::skip_without_backend()) return;  \
  } while (0)

// WINNOW_TEST_SMALL=1 (dev/gpu_suite.sh's sanitizer mode): the few large [gpu] cases
// shrink to sizes that finish in seconds under compute-sanitizer memcheck, keeping what
// they test (several chunks, key splits, the last block). sized(full, small) picks one.
inline bool small_sizes() {
  static const bool small = [] {
    const char* v = std::getenv("WINNOW_TEST_SMALL");
    return v != nullptr && std::string(v) == "1";
  }();
  return small;
}
inline int64_t sized(int64_t full, int64_t small) { return small_sizes() ? small : full; }

// Fresh random inputs on each run; the seed is printed so a failure can be replayed
// with WINNOW_TEST_SEED.
inline uint64_t test_seed() {
  static uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("WINNOW_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    // Printed once so that a failing run can be replayed.
    uint64_t v = static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
    std::fprintf(stderr, "WINNOW_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

// A fresh, empty cache folder for one test (removed at scope exit).
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("winnow-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace winnow::test
