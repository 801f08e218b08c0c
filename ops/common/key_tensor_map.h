// The key tensor map of the TMA loads of the tensor-core paths (the wgmma topk kernel and
// the retrieval mode): k as bytes, [num_keys rows][row_bytes], boxes of 128 bytes x
// key_tile rows with the 128-byte swizzle (templates/ptx/wgmma_tiles.cuh's layout), rows past
// the key count read as zeros. Encoded on the host from the caller's pointer, per call: no
// allocation, no synchronisation (CUDA-graph safe).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "ops/common/tensor.h"

namespace winnow::ops {

CUtensorMap key_tensor_map(const TensorView& k, int64_t num_keys, int row_bytes, int key_tile);

}  // namespace winnow::ops
