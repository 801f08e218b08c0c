// The emulated sm_90a kernel cases (tests/test_topk_emulated.cpp) again with
// -DWINNOW_INDEX_ORDER_BITMAP=1: index-ordered rows written through the bitmap of the
// chosen keys instead of the bitonic sort (templates/index_order.cuh), the same checks
// (fused == materialize + exact select bit for bit, the reference). The configs there are
// in an anonymous namespace, so this file's instances of the kernel are its own.
#define WINNOW_INDEX_ORDER_BITMAP 1
#define EMU_CASE(what) "emulated sm_90a kernel, index order by bitmap: " what
#include "test_topk_emulated.cpp"
