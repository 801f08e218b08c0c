// A borrowed tensor as the ops see it (the C API's winnowTensor_t, without the C names).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace winnow::ops {

enum class DType { Invalid, F32, F16, BF16, E4M3, I32 };
const char* dtype_name(DType t);  // "fp32", "fp16", "bf16", "fp8_e4m3", "int32"
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

}  // namespace winnow::ops
