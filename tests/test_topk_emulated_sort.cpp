// The emulated sm_90a kernel cases (tests/test_topk_emulated.cpp) again with
// -DWINNOW_INDEX_ORDER_BITMAP=0: index-ordered rows written through the bitonic sort by
// index instead of the bitmap of the chosen keys (templates/topk/index_order.cuh, the default),
// the same checks (fused == materialize + exact select bit for bit, the reference). The
// configs there are in an anonymous namespace, so this file's instances of the kernel are
// its own.
#define WINNOW_INDEX_ORDER_BITMAP 0
#define EMU_CASE(what) "emulated sm_90a kernel, index order by the sort: " what
#include "test_topk_emulated.cpp"
