#include "ops/common/key_tensor_map.h"

#include <algorithm>

#include "runtime/cuda_driver.h"

namespace winnow::ops {

CUtensorMap key_tensor_map(const TensorView& k, int64_t num_keys, int row_bytes, int key_tile) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes), cuuint64_t(std::max<int64_t>(num_keys, 1))};
  const cuuint64_t strides[1] = {cuuint64_t(k.strides[0]) * cuuint64_t(dtype_bytes(k.dtype))};
  const cuuint32_t box[2] = {128u, cuuint32_t(key_tile)};
  const cuuint32_t element_strides[2] = {1u, 1u};
  rt::check(rt::driver().cuTensorMapEncodeTiled(
                &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, k.data, dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            "cuTensorMapEncodeTiled (k)");
  return map;
}

}  // namespace winnow::ops
