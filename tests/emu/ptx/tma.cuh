// CPU stand-in of templates/ptx/tma.cuh for tests/emu/cuda_emulation.h. The tensor map's
// opaque bytes hold an EmuTmaMap (made by emu_key_tensor_map, the test's side of
// ops/common/key_tensor_map.cpp: uint8 elements, 2-D, a 128-byte box width, 128-byte swizzle);
// a load copies the box at once, zero-filling outside the tensor, swizzled as the
// hardware does (16-byte chunk c of box row r at r * 128 + ((c ^ (r % 8)) * 16) from a
// 1024-byte aligned destination), then completes its bytes on the barrier.
#pragma once
#include <cstring>

#include "ptx/mbarrier.cuh"
#include "common/portable.cuh"
#include "ptx/tma_map.cuh"

namespace winnow {

struct EmuTmaMap {
  const unsigned char* base;
  long long row_bytes;  // dimension 0 (bytes)
  long long rows;       // dimension 1
  long long stride;     // bytes from one row to the next
  int box_rows;         // the box is 128 bytes x box_rows
};
static_assert(sizeof(EmuTmaMap) <= sizeof(TmaMap), "fits the opaque bytes");

inline TmaMap emu_key_tensor_map(const void* k, long long num_keys, long long row_bytes,
                                 long long stride_bytes, int key_tile) {
  TmaMap m{};
  const EmuTmaMap e{static_cast<const unsigned char*>(k), row_bytes, num_keys > 0 ? num_keys : 1,
                    stride_bytes, key_tile};
  std::memcpy(&m, &e, sizeof e);
  return m;
}

inline void tma_prefetch(const TmaMap*) {}

namespace emu_detail {
// The box at (c0, c1) written at `out`, swizzled; returns its bytes.
inline unsigned tma_box(unsigned char* out, const EmuTmaMap& e, int c0, int c1) {
  for (int r = 0; r < e.box_rows; ++r) {
    for (int b = 0; b < 128; ++b) {
      const long long row = (long long)c1 + r, col = (long long)c0 + b;
      const bool inside = row >= 0 && row < e.rows && col >= 0 && col < e.row_bytes;
      out[r * 128 + (((b >> 4) ^ (r & 7)) << 4) + (b & 15)] = inside ? e.base[row * e.stride + col] : 0;
    }
  }
  return unsigned(128 * e.box_rows);
}
}  // namespace emu_detail

inline void tma_load_2d(void* dst, const TmaMap* map, u64* bar, int c0, int c1) {
  EmuTmaMap e;
  std::memcpy(&e, map, sizeof e);
  if (shared_address(dst) % 1024 != 0) winnow_emu::fail("TMA: 128-byte swizzle needs a 1024-byte aligned box");
  mbarrier_complete_tx(bar, emu_detail::tma_box(static_cast<unsigned char*>(dst), e, c0, c1));
}

}  // namespace winnow
