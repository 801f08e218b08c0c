// Lets one header serve NVRTC, nvcc and the host compiler: device code that also makes
// sense on the host (decoding, tie order, bins) is written once and unit-tested on the CPU.
#pragma once
#if defined(__CUDACC__)
#define WINNOW_HD __host__ __device__ __forceinline__
#else
#define WINNOW_HD inline
#endif

namespace winnow {

typedef unsigned int u32;
typedef unsigned long long u64;

WINNOW_HD u32 float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  u32 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

WINNOW_HD float bits_float(u32 u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace winnow
