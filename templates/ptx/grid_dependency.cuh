// Programmatic dependent launch (sm_90): a kernel launched with the host's
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while the kernel before
// it on the stream is still running; it must call grid_dependency_wait before it touches
// anything that kernel writes or reads. The wait returns once every kernel before it has
// completed and its memory is visible; it returns at once in a kernel launched without the
// attribute. Every thread of the retrieval mode's later launches calls it on every path,
// so a launch that completes implies that those before it have (ops/knn/knn_retrieval.cpp).
//
// Each kernel of the retrieval mode and of the paged decode stream path calls
// grid_dependency_trigger first: the next launch is then scheduled once every CTA of this
// grid has started (not when the grid ends), and its CTAs wait in grid_dependency_wait,
// so a launch's setup overlaps the kernel before it (a call of the paged stream path has up
// to 19 launches, most of them short, empty rounds). It
// needs every later launch to wait before it touches what earlier ones write, as above.
#pragma once

namespace winnow {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void grid_dependency_trigger() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif

}  // namespace winnow
