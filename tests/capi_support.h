// Helpers of the C API tests: status checks with the last error and a context with the
// disk cache off.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "support.h"
#include "winnow.h"

// Checks the status and a substring of the thread's last error.
#define REQUIRE_STATUS(call, status, text)                                  \
  do {                                                                      \
    const winnowStatus_t got_ = (call);                                     \
    INFO("last error: " << winnowGetLastError());                           \
    REQUIRE(winnowGetStatusString(got_) == winnowGetStatusString(status));  \
    REQUIRE_THAT(std::string(winnowGetLastError()), Catch::Matchers::Contains(text)); \
  } while (0)

// Requires success, with the call and the last error in the message.
#define REQUIRE_OK(call)                         \
  do {                                           \
    winnowStatus_t s_ = (call);                  \
    INFO(#call << ": " << winnowGetLastError()); \
    REQUIRE(s_ == WINNOW_STATUS_SUCCESS);        \
  } while (0)

namespace winnow::test {


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
