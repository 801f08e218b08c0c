// Helpers of the C API tests: a status check with the last error, a scoped environment
// variable, and a context with the disk cache off.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "winnow.h"

// Checks the status and a substring of the thread's last error.
#define REQUIRE_STATUS(call, status, text)                                  \
  do {                                                                      \
    const winnowStatus_t got_ = (call);                                     \
    INFO("last error: " << winnowGetLastError());                           \
    REQUIRE(winnowGetStatusString(got_) == winnowGetStatusString(status));  \
    REQUIRE_THAT(std::string(winnowGetLastError()), Catch::Matchers::Contains(text)); \
  } while (0)

namespace winnow::test {

// Sets an environment variable for one scope (tests run one case per process under ctest,
// but restore it anyway for a plain run of the test binary).
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(const char* n, const std::string& value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

struct Context {
  ScopedEnv no_disk{"WINNOW_DISABLE_DISK_CACHE", "1"};
  winnowContext_t h = nullptr;
  Context() {
    INFO("last error: " << winnowGetLastError());
    REQUIRE(winnowCreate(&h, 0) == WINNOW_STATUS_SUCCESS);
  }
  ~Context() { winnowDestroy(h); }
};

}  // namespace winnow::test
