// A contiguous winnowTensor_t for the C API tests.
#pragma once
#include <initializer_list>

#include "ops/common/tensor.h"
#include "winnow.h"

namespace winnow::test {

inline winnowTensor_t capi_tensor(void* data, winnowDataType_t dtype,
                                  std::initializer_list<int64_t> shape) {
  const ops::TensorView v = ops::contiguous_view(data, ops::DType::Invalid, shape);
  winnowTensor_t t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    t.shape[i] = v.shape[i];
    t.strides[i] = v.strides[i];
  }
  t.device = 0;
  return t;
}

}  // namespace winnow::test
