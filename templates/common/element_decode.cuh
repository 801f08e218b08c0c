// Exact decoding of the stored element types to fp32 (every fp8/fp16/bf16 value is a
// float), so the kernel and the CPU reference start from the same numbers.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// Element type codes, shared with the host (compiler/plan/kernel_plan.h ElemType).
enum : int { kElemF32 = 0, kElemF16 = 1, kElemBF16 = 2, kElemE4M3 = 3 };

WINNOW_HD float decode_bf16(unsigned short b) { return bits_float(u32(b) << 16); }

WINNOW_HD float decode_f16(unsigned short h) {
  u32 sign = u32(h & 0x8000u) << 16;
  u32 exp = (h >> 10) & 0x1Fu;
  u32 man = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal: man * 2^-24, exact in fp32.
    float v = float(man) * bits_float(0x33800000u);  // 2^-24
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// decode_f16 in one instruction on the device (cvt.f32.f16 is exact: the same value for
// every input but the NaNs, which stay NaNs, their payloads aside); decode_f16 elsewhere.
// For the hot loops (the retrieval mode's norms: the software decode's branches made
// knn-l2 several times slower than knn-ip).
WINNOW_HD float decode_f16_fast(unsigned short h) {
#if defined(__CUDA_ARCH__)
  float x;
  asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
  return x;
#else
  return decode_f16(h);
#endif
}

// OCP fp8 e4m3 ("fn"): no infinities, S.1111.111 is NaN, largest finite 448.
WINNOW_HD float decode_e4m3(unsigned char b) {
  u32 sign = u32(b & 0x80u) << 24;
  u32 exp = (b >> 3) & 0xFu;
  u32 man = b & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (exp == 0) {
    float v = float(man) * bits_float(0x3B000000u);  // man * 2^-9
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// fp32 -> bf16, round to nearest even (NaN stays a quiet NaN): the pooled keys of
// block-select are rounded by this on the device and by the host reference alike.
WINNOW_HD unsigned short encode_bf16(float f) {
  u32 u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

template <int kElem>
WINNOW_HD float decode_element(const void* base, long long i) {
  if (kElem == kElemF32) return static_cast<const float*>(base)[i];
  if (kElem == kElemF16) return decode_f16(static_cast<const unsigned short*>(base)[i]);
  if (kElem == kElemBF16) return decode_bf16(static_cast<const unsigned short*>(base)[i]);
  return decode_e4m3(static_cast<const unsigned char*>(base)[i]);
}

}  // namespace winnow
