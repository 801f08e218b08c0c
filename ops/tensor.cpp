#include "ops/tensor.h"

namespace winnow::ops {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::E4M3: return "fp8_e4m3";
    case DType::I32: return "int32";
    case DType::Invalid: break;
  }
  return "invalid";
}

int dtype_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::E4M3: return 1;
    case DType::I32: return 4;
    case DType::Invalid: break;
  }
  return 0;
}

}  // namespace winnow::ops
