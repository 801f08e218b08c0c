// The emulated sm_90a kernel cases (tests/test_topk_emulated.cpp) again with
// -DWINNOW_FILTER_SEGMENTS=1: each visitor warp appends to its own segment of a row's
// CandidateBuffer and compacts it alone (templates/topk/topk_kernel.cuh), the same checks
// (fused == materialize + exact select bit for bit, the reference). The configs there are
// in an anonymous namespace, so this file's instances of the kernel are its own.
#define WINNOW_FILTER_SEGMENTS 1
#define EMU_CASE(what) "emulated sm_90a kernel, filter segments: " what
#include "test_topk_emulated.cpp"
