// The paged decode call's fallback rounds under CUDA graph capture: this kernel, launched
// after round 0's select, sets the conditional handle of the IF node that holds rounds
// 1 .. kKnnRadixRounds (ops/paged/paged_stream.cpp) to whether round 0 sent any row back,
// so that a replay with no such row (the common case) skips their launches.
// cudaGraphSetConditional is a builtin of the CUDA runtime that NVRTC lowers to a call the
// driver resolves when it loads the module: no relocatable code, no libcudadevrt. The
// declaration is the runtime's own (cuda_device_runtime_api.h); NVRTC only.
#pragma once
#include "knn/knn_params.cuh"

#if defined(__CUDACC_RTC__)
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

namespace winnow {

// One thread: the handle takes 1 when round 0's select sent a row to round 1.
__device__ __forceinline__ void paged_round_gate(unsigned long long handle, const u32* counters) {
  if (threadIdx.x == 0) cudaGraphSetConditional(handle, counters[kKnnRoundRows + 1] != 0u ? 1u : 0u);
}

}  // namespace winnow
#endif
