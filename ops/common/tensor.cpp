#include "ops/common/tensor.h"

namespace winnow::ops {

int dtype_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::E4M3: return 1;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::Invalid: break;
  }
  return 0;
}

TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = int(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t stride = 1;
  for (int j = v.ndim - 1; j >= 0; --j) {
    v.strides[j] = stride;
    stride *= v.shape[j];
  }
  return v;
}

TensorView row_slice(const TensorView& t, int64_t first, int64_t count) {
  if (!t.present()) return t;
  TensorView v = t;
  v.data = static_cast<char*>(t.data) + first * t.strides[0] * dtype_bytes(t.dtype);
  v.shape[0] = count;
  return v;
}

TensorView row_vector(const TensorView& t, int64_t row) {
  TensorView v;
  v.data = static_cast<char*>(t.data) + row * t.strides[0] * dtype_bytes(t.dtype);
  v.dtype = t.dtype;
  v.ndim = 1;
  v.shape[0] = t.shape[1];
  v.strides[0] = 1;
  v.device = t.device;
  return v;
}

}  // namespace winnow::ops
