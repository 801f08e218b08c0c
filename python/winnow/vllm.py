"""vLLM's sparse-attention indexer formats.

Prefill: q [T, H, 128] fp8, k [N, 128] fp8 with k_scale [N] fp32 (or its uint8 [N, 4]
bytes), weights [T, H] fp32, ks / ke int32 [T], the result int32 in the caller's [T, 2048]
buffer, indices relative to ks, -1 padded: what fp8_mqa_logits + top_k_per_row_prefill
produce, without the [T, N] logits.

Decode: q [B, next_n, H, 128] fp8, the paged cache uint8 [num_blocks, 64, 1, 132], weights
[B * next_n, H] fp32, seq_lens int32 [B, next_n] (or [B]), block_table int32
[B, max_blocks], the result int32 in the caller's buffer rows [0, B * next_n): token
positions in [0, len), -1 padded: what fp8_paged_mqa_logits + a decode top-k produce,
without the [B * next_n, max_model_len] logits."""
import torch

from .indexer import DecodeIndexer, PrefillIndexer

_indexers = {}
_decode_indexers = {}  # (device, H, topk, next_n, max_blocks_per_seq) -> [DecodeIndexer]


def prefill_indexer(heads=64, topk=2048, head_dim=128, device=0):
    """The process's PrefillIndexer for this shape (built, so compiled, on first use)."""
    key = (int(device), heads, topk, head_dim)
    if key not in _indexers:
        _indexers[key] = PrefillIndexer(heads, topk, head_dim, device=device)
    return _indexers[key]


def fp8_mqa_topk_indices(q, kv, weights, ks, ke, topk_indices):
    """The fused slot of vllm/utils/deep_gemm.py: kv = (k, k_scale); writes
    topk_indices[:T, :topk] (topk = its width) and returns True, or returns False (the
    caller falls back) when no indexer of this shape was built before a CUDA-graph capture
    (building compiles, which a capture must not do)."""
    k, k_scale = kv
    device = q.get_device()
    key = (device, q.shape[1], topk_indices.shape[1], q.shape[2])
    if key not in _indexers and torch.cuda.is_current_stream_capturing():
        return False
    prefill_indexer(q.shape[1], topk_indices.shape[1], q.shape[2], device)(
        q, k, k_scale, weights, ks, ke, topk_indices)
    return True


def _decode_key(device, heads, topk, next_n, max_blocks_per_seq):
    return (int(device), heads, topk, next_n, max_blocks_per_seq)


def _fitting_decode_indexer(key, batch):
    """The built DecodeIndexer of this shape with the smallest max_batch >= batch, or None."""
    fits = [i for i in _decode_indexers.get(key, ()) if i.max_batch >= batch]
    return min(fits, key=lambda i: i.max_batch) if fits else None


def decode_indexer(heads=64, topk=2048, next_n=1, *, batch, max_blocks_per_seq, device=0,
                   max_total_keys=0):
    """The process's DecodeIndexer for this shape and at least `batch` requests: one built
    before (the smallest that fits), or a new one for the next power of two of requests
    (built, so compiled, now: call this before a CUDA-graph capture). Indexers are kept for
    the process: a captured graph holds their workspaces. Each one's workspace holds
    max_total_keys (default max_batch * max_blocks_per_seq * 64) x 132 bytes."""
    key = _decode_key(device, heads, topk, next_n, max_blocks_per_seq)
    found = _fitting_decode_indexer(key, batch)
    if found is None:
        found = DecodeIndexer(heads, topk, next_n, max_batch=1 << max(batch - 1, 0).bit_length(),
                              max_blocks_per_seq=max_blocks_per_seq,
                              max_total_keys=max_total_keys, device=device)
        _decode_indexers.setdefault(key, []).append(found)
    return found


def decode_blocks_per_seq(max_model_len, block_table):
    """Block table entries a request may use: max_model_len / 64 rounded up, at most the
    table's width."""
    return min(-(-int(max_model_len) // 64), block_table.shape[1])


def fp8_paged_mqa_topk_indices(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                               topk_indices, *, previous_as_hint=False):
    """The paged slot beside fp8_mqa_topk_indices, in fp8_paged_mqa_logits' argument order
    without its schedule metadata and clean_logits (check the current vLLM
    source before relying on the order): writes topk_indices[:B * next_n, :topk] (topk =
    its width) with token positions, -1 padded, and returns True; or returns False (the
    caller falls back) when no indexer of this shape and batch was built before a CUDA-graph
    capture (building compiles, which a capture must not do). previous_as_hint: the rows
    of topk_indices as the previous step left them are the call's hint (a request that
    kept its row gives its last selection; any other content costs time, never
    exactness). Off by default: measured slower than no hint (docs/paged-decode.md)."""
    device = q.get_device()
    B, next_n, heads = q.shape[0], q.shape[1], q.shape[2]
    blocks = decode_blocks_per_seq(max_model_len, block_tables)
    key = _decode_key(device, heads, topk_indices.shape[1], next_n, blocks)
    if _fitting_decode_indexer(key, B) is None and torch.cuda.is_current_stream_capturing():
        return False
    decode_indexer(heads, topk_indices.shape[1], next_n, batch=B, max_blocks_per_seq=blocks,
                   device=device)(q, kv_cache, weights, context_lens, block_tables,
                                  topk_indices, topk_indices if previous_as_hint else None)
    return True
