"""vLLM's prefill indexer format (ENGINES.md): q [T, H, 128] fp8, k [N, 128] fp8 with
k_scale [N] fp32 (or its uint8 [N, 4] bytes), weights [T, H] fp32, ks / ke int32 [T], the
result int32 in the caller's [T, 2048] buffer, indices relative to ks, -1 padded: what
fp8_mqa_logits + top_k_per_row_prefill produce, without the [T, N] logits."""
import torch

from .indexer import PrefillIndexer

_indexers = {}


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
