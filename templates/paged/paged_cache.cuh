// The engines' paged indexer key cache (vLLM and SGLang decode; ../shared/ENGINES.md) and
// which cached keys each decode query sees: written once for the device and the CPU
// reference.
//
// Cache: uint8 [num_blocks, 64, 1, 132]. Block b holds 64 keys: bytes
// [b * 8448, b * 8448 + 8192) are the 64 x 128 fp8 e4m3 keys (key i at i * 128), then
// 64 fp32 scales (key i's at b * 8448 + 8192 + 4 i). Request r's token t lives in block
// block_table[r][t / 64], slot t % 64.
//
// Visibility (DeepGEMM's fp8_paged_mqa_logits and its reference, as the engines call it):
// with context_lens [B], query j (0 <= j < next_n) of request r sees positions
// t < len[r] - next_n + 1 + j (the last query sees all len[r] tokens); with context_lens
// [B, next_n], query j sees t < lens[r][j]. Negative counts see nothing. A request's
// key count is the most any of its queries sees.
#pragma once
#include "common/portable.cuh"

namespace winnow {

inline constexpr int kPageKeys = 64;
inline constexpr int kPageDim = 128;
inline constexpr int kPageKeyBytes = kPageKeys * kPageDim;    // 8192
inline constexpr int kPageBytes = kPageKeys * (kPageDim + 4);  // 8448

// Keys query j of a request sees; `lens` is the request's row of context_lens (one
// entry, or next_n entries when per_query).
WINNOW_HD int paged_visible_keys(const int* lens, int next_n, int j, bool per_query) {
  const int v = per_query ? lens[j] : lens[0] - next_n + 1 + j;
  return v > 0 ? v : 0;
}

// The request's key count: what its last-seeing query sees (lens[0] itself in the [B]
// form, so a length below next_n still counts as that many keys to gather).
WINNOW_HD int paged_request_keys(const int* lens, int next_n, bool per_query) {
  if (!per_query) return lens[0];
  int n = 0;
  for (int j = 0; j < next_n; ++j) n = lens[j] > n ? lens[j] : n;
  return n;
}

}  // namespace winnow
