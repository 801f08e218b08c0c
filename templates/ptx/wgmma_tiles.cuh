// Warpgroup MMA (sm_90a wgmma) pieces of the head-sum path: the shared-memory tile layout
// the tensor cores read (its descriptors, fences and instructions: wgmma_ops.cuh).
//
// Tiles are K-major with the 128-byte swizzle. A tile of ROWS rows of RB = d * bytes
// bytes is stored as RB / 128 atoms of ROWS x 128 bytes; in an atom, row r's 16-byte
// chunk c sits at r * 128 + ((c ^ (r % 8)) * 16). Atoms start on 1024-byte boundaries
// (the 8-row swizzle period), which the descriptors' zero base offset assumes.
#pragma once
#include "common/element_decode.cuh"
#include "common/portable.cuh"
#include "ptx/wgmma_ops.cuh"

namespace winnow {

// Byte offset of row `row`'s 16-byte chunk `chunk` (0 .. RB / 16 - 1) in a swizzled tile
// of ROWS rows.
template <int ROWS>
WINNOW_HD constexpr int swizzled_chunk(int row, int chunk) {
  return (chunk >> 3) * ROWS * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// Byte offset of (row0, byte k0 of d) in a swizzled tile of ROWS rows: where a descriptor
// for rows row0.. (a multiple of 8) and the k step starting at byte k0 points.
template <int ROWS>
WINNOW_HD constexpr int swizzled_at(int row0, int k0) {
  return (k0 >> 7) * ROWS * 128 + row0 * 128 + (k0 & 127);
}

}  // namespace winnow
