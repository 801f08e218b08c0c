// The kernel's run-time arguments. Included by the host (ops/topk/topk_op.cpp) and by NVRTC, so
// the layout is one definition; only plain types.
#pragma once

namespace winnow {

struct TopkParams {
  const void* q;              // [rows, H, d] elements of the q type
  long long q_row_stride;     // elements
  const void* k;              // [num_keys, d]
  long long k_row_stride;     // elements
  const float* w;             // [rows, H] or null
  long long w_row_stride;
  const float* kscale;        // [num_keys] or null
  const float* ksq;           // [num_keys] |k|^2 given by the caller, or null: summed here
  const int* window_start;    // [rows] for range windows
  const int* window_end;
  int* out_indices;           // [rows, k] (top-k mode)
  long long out_indices_stride;
  float* out_scores;          // [rows, k] (top-k, optional) or [rows, num_keys] (materialize)
  long long out_scores_stride;
  int rows;
  int num_keys;
  long long causal_offset;    // position of row 0
  int causal_ratio;           // m
  // Sharded keys (ops/shard/shard_merge.h): k holds global keys [key_offset, key_offset +
  // num_keys) of total_keys; windows are in global numbers, outputs too. Not sharded: 0
  // and num_keys.
  int key_offset;
  unsigned long long* workspace;  // per CTA: rows_per_cta * (capacity + k) rank keys
  // [0] fallback rows, [1] rows with a bad window, [2] the next work item (row block x
  // part) a CTA takes; zero before the launch (execute clears it, also in a CUDA graph).
  unsigned int* counters;
  // Key splits: each row's window is cut into key_splits parts scored by different CTAs;
  // each writes its part's exact top k to partials, and the last of a row block's CTAs
  // (block_done counts them) merges them. 1: no split.
  int key_splits;
  int negate_scores;  // 1: out_scores holds -score (output_score)
  unsigned long long* partials;   // [row blocks][splits][rows_per_cta][next_pow2(k)]
  unsigned int* block_done;       // [row blocks], zero before the launch
  // Sample hint: candidate keys scored first as part of each row's sample (null: none).
  // An entry counts only inside the row's window and when above every earlier counted
  // entry (templates/topk/sample_keys.cuh), so ascending hints count whole; the first
  // min(kCapacity, 2 next_pow2(k)) entries are read (TopkOp::max_sample_hint).
  const int* sample_hint;
  int sample_hint_count;
  int total_keys;
};

}  // namespace winnow
