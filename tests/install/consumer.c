/* A program outside the winnow tree, built against an installed winnow: by
 * tests/install/CMakeLists.txt (find_package, shared and static) and with
 * `pkg-config --cflags --libs winnow` (tests/install/run.cmake). Needs no GPU: it checks the
 * version, a status string and the descriptor defaults, then creates a context and builds
 * (compiles) a small plan for sm_90a, which works with or without a device. */
#include <stdio.h>
#include <string.h>

#include "winnow.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    winnowStatus_t s_ = (call);                                                      \
    if (s_ != WINNOW_STATUS_SUCCESS) {                                               \
      fprintf(stderr, "%s: %s (%s)\n", #call, winnowGetStatusString(s_),             \
              winnowGetLastError());                                                 \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main(void) {
  winnowContext_t ctx = NULL;
  winnowPlan_t plan = NULL;
  winnowProblemDesc_t desc;
  const char* source = NULL;
  size_t workspace = 0;
  winnowStatus_t status;

  if (winnowGetVersion() != WINNOW_VERSION_CODE) {
    fprintf(stderr, "library version %u, header %d\n", (unsigned)winnowGetVersion(),
            WINNOW_VERSION_CODE);
    return 1;
  }
  if (strcmp(winnowGetStatusString(WINNOW_STATUS_SUCCESS), "success") != 0) return 1;
  winnowProblemDescInit(&desc);
  if (desc.struct_size != sizeof desc || desc.score != WINNOW_SCORE_RELU_MH) return 1;
  /* An invalid argument fails cleanly, with a message. */
  if (winnowCreate(&ctx, -1) != WINNOW_STATUS_INVALID_ARGUMENT || ctx != NULL ||
      winnowGetLastError()[0] == '\0')
    return 1;

  CHECK(winnowCreate(&ctx, 0));
  desc.heads = 16;
  desc.head_dim = 128;
  desc.q_dtype = WINNOW_DTYPE_BFLOAT16;
  desc.k_dtype = WINNOW_DTYPE_BFLOAT16;
  desc.key_scale = 0;
  desc.k = 64;
  desc.arch = "sm_90a";
  CHECK(winnowPlanCreate(ctx, &desc, &plan));
  CHECK(winnowPlanBuild(plan));
  CHECK(winnowPlanGetSource(plan, &source));
  if (source == NULL || strlen(source) == 0) return 1;
  /* The workspace size needs the device (its CTA count): without one it is not known. */
  status = winnowPlanGetWorkspaceSize(plan, &workspace);
  if (status != WINNOW_STATUS_SUCCESS && status != WINNOW_STATUS_NOT_BUILT) {
    fprintf(stderr, "winnowPlanGetWorkspaceSize: %s\n", winnowGetStatusString(status));
    return 1;
  }
  CHECK(winnowPlanDestroy(plan));
  CHECK(winnowDestroy(ctx));
  printf("winnow %d.%d.%d: built a relu_mh plan for sm_90a (%s)\n", WINNOW_VERSION_MAJOR,
         WINNOW_VERSION_MINOR, WINNOW_VERSION_PATCH,
         status == WINNOW_STATUS_SUCCESS ? "on the device" : "compile only, no device");
  return 0;
}
