// CPU stand-in of templates/ptx/mma_sync.cuh for tests/emu/cuda_emulation.h: the same
// functions, with the warp's fragments exchanged between the lane threads and the results
// placed by the PTX ISA's layouts (mma.m16n8k16 .row.col, ldmatrix .m8n8 .trans); copies
// are synchronous and shared addresses count from the CTA's window (winnow_emu::window()).
#pragma once
#include "common/element_decode.cuh"
#include "common/portable.cuh"

namespace winnow {

inline unsigned shared_address(const void* smem) {
  const auto* p = static_cast<const unsigned char*>(smem);
  const unsigned char* w = winnow_emu::window();
  if (p < w || p >= w + (1u << 18)) winnow_emu::fail("shared_address of memory outside the CTA's shared window");
  return unsigned(p - w);
}

inline float ld_shared_f32(unsigned addr) {
  if (addr + 4 > (1u << 18)) winnow_emu::fail("ld_shared_f32 outside the CTA's shared window");
  float v;
  std::memcpy(&v, winnow_emu::window() + addr, 4);
  return v;
}

inline float emu_half(u32 word, int hi) { return decode_bf16((unsigned short)(hi ? word >> 16 : word)); }

inline void mma_bf16_16816(const u32 (&a)[4], u32 b0, u32 b1, float& c0, float& c1, float& c2,
                           float& c3) {
  const u32 words[6] = {a[0], a[1], a[2], a[3], b0, b1};
  winnow_emu::publish(words, 6);
  const auto& s = winnow_emu::warp->slots;
  // A (16 x 16): row r, column k is in lane (r % 8) * 4 + (k % 8) / 2, register
  // (r >= 8) + 2 (k >= 8), half k % 2. B (16 x 8): row k, column n is in lane n * 4 +
  // (k % 8) / 2, register 4 + (k >= 8), half k % 2.
  auto A = [&](int r, int k) { return emu_half(s[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k % 2); };
  auto B = [&](int k, int n) { return emu_half(s[n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2); };
  const int g = int(winnow_emu::lane) / 4, t4 = int(winnow_emu::lane) % 4;
  float* c[4] = {&c0, &c1, &c2, &c3};
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), n = 2 * t4 + i % 2;
    float acc = *c[i];
    for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    *c[i] = acc;
  }
  winnow_emu::done_reading();
}

inline u32 pack_bf16x2(float lo, float hi) {
  return u32(encode_bf16(lo)) | (u32(encode_bf16(hi)) << 16);
}

// Matrix i's rows come from the addresses of lanes 8i .. 8i + 7. A lane gets row lane / 4,
// columns 2 (lane % 4) and 2 (lane % 4) + 1; transposed, rows 2 (lane % 4) and
// 2 (lane % 4) + 1 of column lane / 4.
inline void emu_ldmatrix_x4(const void* row, bool trans, u32& r0, u32& r1, u32& r2, u32& r3) {
  winnow_emu::warp->addresses[winnow_emu::lane] = row;
  winnow_emu::warp->sync.arrive_and_wait();
  const int g = int(winnow_emu::lane) / 4, t4 = int(winnow_emu::lane) % 4;
  u32* out[4] = {&r0, &r1, &r2, &r3};
  for (int i = 0; i < 4; ++i) {
    auto M = [&](int r, int c) {
      return static_cast<const unsigned short*>(winnow_emu::warp->addresses[8 * i + r])[c];
    };
    *out[i] = trans ? u32(M(2 * t4, g)) | (u32(M(2 * t4 + 1, g)) << 16)
                    : u32(M(g, 2 * t4)) | (u32(M(g, 2 * t4 + 1)) << 16);
  }
  winnow_emu::warp->sync.arrive_and_wait();
}
inline void ldmatrix_x4(const void* row, u32& r0, u32& r1, u32& r2, u32& r3) {
  emu_ldmatrix_x4(row, false, r0, r1, r2, r3);
}
inline void ldmatrix_x4_trans(const void* row, u32& r0, u32& r1, u32& r2, u32& r3) {
  emu_ldmatrix_x4(row, true, r0, r1, r2, r3);
}

inline void copy_async_16(void* smem, const void* global, bool valid) {
  if (valid) std::memcpy(smem, global, 16);
  else std::memset(smem, 0, 16);
}
inline void copy_async_4(void* smem, const void* global, bool valid) {
  if (valid) std::memcpy(smem, global, 4);
  else std::memset(smem, 0, 4);
}
inline void copy_async_commit() {}
template <int Pending>
inline void copy_async_wait() {}

inline u64 load_cg(const u64* ptr) { return std::atomic_ref<u64>(*const_cast<u64*>(ptr)).load(); }

}  // namespace winnow
