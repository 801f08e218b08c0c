// Host-side problem data for the demo, the benchmark and the tests: random tensors in
// each stored type, with their exact fp32 values beside the stored bytes.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "ops/common/tensor.h"

namespace winnow::ops {

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<uint8_t> bytes;  // the stored encoding, as the device reads it
  std::vector<float> values;   // the same numbers, decoded
  size_t count() const { return values.size(); }
};

// Rounds to the nearest value of the type (ties to even; fp8 saturates at +-448).
uint16_t encode_bf16(float f);
uint16_t encode_f16(float f);
uint8_t encode_e4m3(float f);

// The fp32 values of `count` stored elements of `dtype` (exact: every stored value is a float).
std::vector<float> decode_values(DType dtype, const void* bytes, size_t count);

// Encodes `values` in `dtype` (values are replaced by what the type can hold).
HostTensor make_tensor(DType dtype, std::vector<float> values);

// count values from N(0, scale^2); with `levels` > 0, integers in [-levels/2, levels/2]
// instead (heavy ties, exact in every type).
HostTensor random_tensor(DType dtype, size_t count, std::mt19937_64& rng, float scale = 1.0f,
                         int levels = 0);

}  // namespace winnow::ops
