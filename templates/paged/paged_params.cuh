// The paged decode kernels' run-time arguments (templates/paged/paged_gather_kernel.cuh).
// Included by the host (ops/paged/paged_topk.cpp) and by NVRTC: one definition, plain types.
#pragma once

namespace winnow {

inline constexpr int kPagedScanThreads = 1024;
inline constexpr int kPagedGatherThreads = 256;

struct PagedParams {
  const unsigned char* cache;   // [num_blocks, 64, 1, 132] (templates/paged/paged_cache.cuh)
  const int* block_table;       // [batch, block_table_stride >= max blocks]
  const int* context_lens;      // [batch] or [batch, next_n] (lens_per_query)
  long long num_blocks;
  long long block_table_stride; // elements
  long long lens_stride;        // elements between requests' lengths
  long long capacity;           // keys the gathered buffers hold
  unsigned char* keys;          // [capacity, 128] fp8 e4m3, packed by request
  float* scales;                // [capacity]
  long long* key_offset;        // [batch]: request r's first packed key
  long long* page_offset;       // [batch + 1]: pages before request r
  int* window_start;            // [batch * next_n]
  int* window_end;
  int batch;
  int next_n;
  int max_keys;                 // max_blocks_per_seq * 64
  int lens_per_query;
};

}  // namespace winnow
