/* Compiled as strict C99 by the build: the public header must stay valid C. */
#include "winnow.h"

static int use_every_type(void) {
  winnowProblemDesc_t d;
  winnowTensor_t t;
  winnowStatus_t s = WINNOW_STATUS_SUCCESS;
  winnowContext_t ctx = 0;
  winnowPlan_t plan = 0;
  winnowCallOptions_t o;
  d.struct_size = sizeof d;
  o.struct_size = sizeof o;
  t.ndim = 0;
  (void)ctx;
  (void)plan;
  return (int)s + (int)d.struct_size + (int)o.struct_size + t.ndim;
}

int winnow_c99_check(void) { return use_every_type(); }
