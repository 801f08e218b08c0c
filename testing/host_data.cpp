#include "testing/host_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/element_decode.cuh"

namespace winnow::ops {

uint16_t encode_bf16(float f) { return winnow::encode_bf16(f); }

namespace {

// The finite values of an encoding with `bits` bits, sorted, each with its code (-0 left
// out, so zero encodes as +0).
template <class Code, class Decode>
std::vector<std::pair<float, Code>> value_table(int bits, Decode decode) {
  std::vector<std::pair<float, Code>> t;
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    float v = decode(Code(c));
    if (!std::isnan(v) && !std::isinf(v) && !(v == 0 && (c >> (bits - 1)))) {
      t.emplace_back(v, Code(c));
    }
  }
  std::sort(t.begin(), t.end());
  return t;
}

// The nearest value's code (ties to the even code); values past the ends saturate.
template <class Code>
Code nearest_code(const std::vector<std::pair<float, Code>>& table, float f) {
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(f, Code(0)));
  if (it == table.end()) return table.back().second;
  if (it == table.begin()) return it->second;
  auto prev = it - 1;
  float dh = it->first - f, dl = f - prev->first;
  if (dl < dh) return prev->second;
  if (dh < dl) return it->second;
  return (prev->second & 1) ? it->second : prev->second;
}

}  // namespace

uint16_t encode_f16(float f) {
  // By the bits, not the table search (the table's 63K entries made each call a chain of
  // cache misses: 10 s for a 60K x 768 test corpus). The nearest half, ties to the even
  // code; finite values past 65504 saturate; -0 (and negatives rounding to zero) encode
  // as +0, as the table did. tests/test_rank_order.cpp checks every half and midpoint.
  if (std::isnan(f)) return 0x7E00;
  if (std::isinf(f)) return f > 0 ? 0x7C00 : 0xFC00;
  uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  x &= 0x7FFFFFFF;
  if (x >= 0x477FE000) return uint16_t(sign | 0x7BFF);  // 65504 and up
  if (x < 0x38800000) {  // below 2^-14: a multiple of 2^-24 (1024 is the first normal)
    float a = 0;
    std::memcpy(&a, &x, 4);
    const uint16_t m = uint16_t(std::lrint(std::ldexp(a, 24)));
    return m == 0 ? 0 : uint16_t(sign | m);
  }
  uint32_t h = (((x >> 23) - 127 + 15) << 10) | ((x >> 13) & 0x3FF);
  const uint32_t rest = x & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry moves into the exponent
  return uint16_t(sign | h);
}

uint8_t encode_e4m3(float f) {
  static const auto table = value_table<uint8_t>(8, winnow::decode_e4m3);
  if (std::isnan(f)) return 0x7F;
  return nearest_code(table, f);
}

std::vector<float> decode_values(DType dtype, const void* bytes, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::F32: v[i] = decode_element<kElemF32>(bytes, (long long)i); break;
      case DType::F16: v[i] = decode_element<kElemF16>(bytes, (long long)i); break;
      case DType::BF16: v[i] = decode_element<kElemBF16>(bytes, (long long)i); break;
      case DType::E4M3: v[i] = decode_element<kElemE4M3>(bytes, (long long)i); break;
      default: throw std::invalid_argument("decode_values: not a floating-point dtype");
    }
  }
  return v;
}

HostTensor make_tensor(DType dtype, std::vector<float> values) {
  HostTensor t;
  t.dtype = dtype;
  const size_t n = values.size();
  t.bytes.resize(n * dtype_bytes(dtype));
  for (size_t i = 0; i < n; ++i) {
    float v = values[i];
    switch (dtype) {
      case DType::F32:
        std::memcpy(&t.bytes[4 * i], &v, 4);
        break;
      case DType::BF16: {
        uint16_t c = encode_bf16(v);
        std::memcpy(&t.bytes[2 * i], &c, 2);
        values[i] = winnow::decode_bf16(c);
        break;
      }
      case DType::F16: {
        uint16_t c = encode_f16(v);
        std::memcpy(&t.bytes[2 * i], &c, 2);
        values[i] = winnow::decode_f16(c);
        break;
      }
      case DType::E4M3: {
        uint8_t c = encode_e4m3(v);
        t.bytes[i] = c;
        values[i] = winnow::decode_e4m3(c);
        break;
      }
      default:
        throw std::invalid_argument("make_tensor: not a floating-point dtype");
    }
  }
  t.values = std::move(values);
  return t;
}

HostTensor random_tensor(DType dtype, size_t count, std::mt19937_64& rng, float scale,
                         int levels) {
  std::vector<float> v(count);
  if (levels > 0) {
    std::uniform_int_distribution<int> d(-levels / 2, levels / 2);
    for (auto& x : v) x = float(d(rng));
  } else {
    std::normal_distribution<float> d(0.0f, scale);
    for (auto& x : v) x = d(rng);
  }
  return make_tensor(dtype, std::move(v));
}

}  // namespace winnow::ops
