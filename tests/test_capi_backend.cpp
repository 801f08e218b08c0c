// The C API's backend choice: winnowCreateWithOptions (versioned options), WINNOW_BACKEND,
// winnowContextBackend; with the llvm backend built, a plan builds through it without a GPU.
#include <catch2/catch.hpp>

#include <string>

#include "capi_support.h"
#include "support.h"
#include "winnow.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using winnow::test::ScopedEnv;

namespace {

struct Ctx {
  winnowContext_t h = nullptr;
  ~Ctx() {
    if (h) winnowDestroy(h);
  }
};

winnowContextOptions_t options(const char* backend) {
  winnowContextOptions_t o;
  winnowContextOptionsInit(&o);
  o.backend = backend;
  return o;
}

}  // namespace

TEST_CASE("C API: a context's backend by option, WINNOW_BACKEND or the default", "[capi]") {
  ScopedEnv no_disk("WINNOW_DISABLE_DISK_CACHE", "1");
  {
    ScopedEnv unset("WINNOW_BACKEND", nullptr);
    Ctx a, b;
    REQUIRE(winnowCreate(&a.h, 0) == WINNOW_STATUS_SUCCESS);
    CHECK_THAT(winnowContextBackend(a.h), StartsWith("nvrtc "));
    const winnowContextOptions_t o = options("nvrtc");
    REQUIRE(winnowCreateWithOptions(&b.h, 0, &o) == WINNOW_STATUS_SUCCESS);
    CHECK_THAT(winnowContextBackend(b.h), StartsWith("nvrtc "));
  }
  CHECK(winnowContextBackend(nullptr) == nullptr);
  Ctx c;
  const winnowContextOptions_t bad = options("gcc");
  REQUIRE_STATUS(winnowCreateWithOptions(&c.h, 0, &bad), WINNOW_STATUS_INVALID_ARGUMENT,
                 "backend must be nvrtc or llvm, not 'gcc'");
  CHECK(c.h == nullptr);
  winnowContextOptions_t old = options("nvrtc");
  old.version = 2;
  REQUIRE_STATUS(winnowCreateWithOptions(&c.h, 0, &old), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->version = 2 is not supported");
  old = options("nvrtc");
  old.struct_size = 4;
  REQUIRE_STATUS(winnowCreateWithOptions(&c.h, 0, &old), WINNOW_STATUS_INVALID_ARGUMENT,
                 "options->struct_size = 4");
  ScopedEnv env("WINNOW_BACKEND", "NVRTC");
  REQUIRE_STATUS(winnowCreate(&c.h, 0), WINNOW_STATUS_INVALID_ARGUMENT,
                 "WINNOW_BACKEND must be nvrtc or llvm, not 'NVRTC'");
}

TEST_CASE("C API: a plan builds with the llvm backend for sm_90a without a GPU", "[capi][llvm]") {
  ScopedEnv no_disk("WINNOW_DISABLE_DISK_CACHE", "1");
  ScopedEnv env("WINNOW_BACKEND", "llvm");
  Ctx ctx;
#ifdef WINNOW_LLVM_BUILT
  REQUIRE(winnowCreate(&ctx.h, 0) == WINNOW_STATUS_SUCCESS);
  CHECK_THAT(winnowContextBackend(ctx.h), StartsWith("llvm clang 19."));
  winnowProblemDesc_t d;
  winnowProblemDescInit(&d);
  d.score = WINNOW_SCORE_IP;
  d.heads = 1;
  d.head_dim = 64;
  d.q_dtype = d.k_dtype = WINNOW_DTYPE_FLOAT16;
  d.k = 16;
  d.arch = "sm_90a";
  winnowPlan_t plan = nullptr;
  REQUIRE(winnowPlanCreate(ctx.h, &d, &plan) == WINNOW_STATUS_SUCCESS);
  const winnowStatus_t built = winnowPlanBuild(plan);
  INFO("last error: " << winnowGetLastError());
  CHECK(built == WINNOW_STATUS_SUCCESS);
  winnowPlanDestroy(plan);
  // sm_100a is NVRTC's alone: the build says so.
  d.arch = "sm_100a";
  REQUIRE(winnowPlanCreate(ctx.h, &d, &plan) == WINNOW_STATUS_SUCCESS);
  REQUIRE_STATUS(winnowPlanBuild(plan), WINNOW_STATUS_COMPILE_ERROR, "sm_90a only");
  winnowPlanDestroy(plan);
#else
  REQUIRE_STATUS(winnowCreate(&ctx.h, 0), WINNOW_STATUS_NOT_SUPPORTED,
                 "llvm backend is not available");
#endif
}
