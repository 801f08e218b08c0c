// A borrowed tensor as the ops see it (the C API's winnowTensor_t, without the C names).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace winnow::ops {

enum class DType { Invalid, F32, F16, BF16, E4M3, I32, U8 };
int dtype_bytes(DType t);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Invalid;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};  // in elements
  int device = 0;
  bool present() const { return data != nullptr || ndim != 0; }
};

// A tensor with row-major (contiguous) strides.
TensorView contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape);

// Rows [first, first + count) of t (dimension 0): the same strides, the data advanced.
// An absent tensor stays absent.
TensorView row_slice(const TensorView& t, int64_t first, int64_t count);

// Row `row` of a 2-D tensor as a 1-D tensor of its shape[1] elements (contiguous rows).
TensorView row_vector(const TensorView& t, int64_t row);

}  // namespace winnow::ops
