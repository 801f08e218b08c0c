// CPU stand-in of templates/ptx/wgmma_ops.cuh for tests/emu/cuda_emulation.h: a wgmma is
// computed when it is issued (a correct kernel does not touch its operands before the
// wait), each thread producing its own accumulator elements by the PTX ISA's D fragment
// layout (m64nN, .f32: d[i] is row 16 warp + lane / 4 + 8 ((i / 2) % 2), column
// 8 (i / 4) + 2 (lane % 4) + i % 2 of the warpgroup's tile) from operands read through
// the descriptors (K-major, 128-byte swizzle: bits 4-6 of an address XOR bits 7-9).
// MN-major (transposed) operands (wgmma_desc_mn): element (n, k) at start + (n / 64) LBO
// + (k / 8) SBO + (k % 8) 128 + 2 (n % 64), swizzled alike. A from registers
// (wgmma_m64n_bf16_rs_mn): the PTX ISA's register fragment of A (.bf16, m64k16), warp w
// holding rows 16 w.. as mma.m16n8k16 holds A: element (row 16 w + r, k) in lane
// 4 (r % 8) + (k % 8) / 2, register r / 8 + 2 (k / 8), half k % 2 (low first); a D row
// only needs A rows of its own warp, so the warp exchanges its registers.
// Products are summed in fp32 in k order: not the tensor cores' rounding, so emulated
// scores are compared with the CPU reference within a tolerance, and fused with
// materialize (both emulated) bit for bit.
#pragma once
#include "common/element_decode.cuh"
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"

namespace winnow {

inline unsigned long long wgmma_desc_mn(const void* p, int lbo) {
  return (0x40000040ull << 32) | (((shared_address(p) & 0x3FFFF) >> 4) | (u32(lbo >> 4) << 16));
}
inline u32 wgmma_desc_lo(const void* p) { return ((shared_address(p) & 0x3FFFF) >> 4) | (1u << 16); }
inline unsigned long long wgmma_desc_from_lo(u32 lo, int byte_offset) {
  return (0x40000040ull << 32) | (lo + u32(byte_offset >> 4));
}
inline void fence_async_smem() {}
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N>
inline void wgmma_pin(float (&)[N]) {}
template <int N, int M>
inline void wgmma_pin_u32(u32 (&)[N][M]) {}
template <int N>
inline void wgmma_wait() {}
template <int Regs>
inline void setmaxnreg_inc() { winnow_emu::register_limit(Regs, true); }
template <int Regs>
inline void setmaxnreg_dec() { winnow_emu::register_limit(Regs, false); }
inline void keep_in_registers(float&, float&) {}
inline float max_nan_zero(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }

namespace emu_detail {
// Element (row, k) of the operand a descriptor points at: row / 8 groups SBO apart, rows
// of a group 128 bytes apart, the k step's bytes inside the row.
// MN_MAJOR: the transposed layout (row: the M or N index).
template <int ELEM, bool MN_MAJOR = false>
inline float wgmma_operand(unsigned long long desc, int row, int k) {
  if ((desc >> 62) != 1) winnow_emu::fail("wgmma: only the 128-byte swizzle is emulated");
  const u32 start = u32(desc & 0x3FFF) << 4, sbo = u32((desc >> 32) & 0x3FFF) << 4;
  const u32 lbo = u32((desc >> 16) & 0x3FFF) << 4;
  constexpr int EB = ELEM == kElemE4M3 ? 1 : 2;
  u32 a = MN_MAJOR ? start + u32(row / 64) * lbo + u32(k / 8) * sbo + u32(k % 8) * 128 + u32(row % 64) * 2
                   : start + u32(row / 8) * sbo + u32(row % 8) * 128 + u32(k * EB);
  a ^= ((a >> 7) & 7u) << 4;
  const unsigned char* p = winnow_emu::window() + a;
  if constexpr (ELEM == kElemE4M3) return decode_e4m3(*p);
  unsigned short h;
  std::memcpy(&h, p, 2);
  if constexpr (ELEM == kElemBF16) return decode_bf16(h);
  return decode_f16(h);
}
}  // namespace emu_detail

template <int N, int ELEM>
inline void wgmma_m64n(float (&d)[N / 2], unsigned long long a, unsigned long long b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "wgmma widths: 32, 64, 128 columns");
  constexpr int KSTEP = ELEM == kElemE4M3 ? 32 : 16;
  const int t = int(threadIdx.x) & 127, warp = t >> 5, lane = t & 31;
  for (int i = 0; i < N / 2; ++i) {
    const int m = warp * 16 + lane / 4 + 8 * ((i >> 1) & 1);
    const int n = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
    float acc = accumulate ? d[i] : 0.0f;
    for (int k = 0; k < KSTEP; ++k)
      acc = std::fma(emu_detail::wgmma_operand<ELEM>(a, m, k), emu_detail::wgmma_operand<ELEM>(b, n, k), acc);
    d[i] = acc;
  }
}

template <int N>
inline void wgmma_m64n_bf16_rs_mn(float (&d)[N / 2], const u32 (&a)[4], unsigned long long b,
                                  int accumulate) {
  static_assert(N == 64 || N == 128, "widths: 64, 128 columns");
  winnow_emu::publish(a, 4);
  const int lane = int(threadIdx.x) & 31;
  auto a_at = [](int r, int k) {  // row r (0..15) of this warp's rows, k 0..15
    const u32 word = winnow_emu::warp->slots[4 * (r % 8) + (k % 8) / 2][r / 8 + 2 * (k / 8)];
    return decode_bf16((unsigned short)(k % 2 ? word >> 16 : word & 0xFFFFu));
  };
  for (int i = 0; i < N / 2; ++i) {
    const int r = lane / 4 + 8 * ((i >> 1) & 1);
    const int n = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
    float acc = accumulate ? d[i] : 0.0f;
    for (int k = 0; k < 16; ++k)
      acc = std::fma(a_at(r, k), emu_detail::wgmma_operand<kElemBF16, true>(b, n, k), acc);
    d[i] = acc;
  }
  winnow_emu::done_reading();
}

}  // namespace winnow
