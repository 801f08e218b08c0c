"""The lightning indexer's top-k, the core of the engine adapters (winnow.vllm,
winnow.sglang): relu_mh with fp8 q and k and a per-key fp32 scale, k best keys per row,
-1 padded. Prefill: window [ks[t], ke[t]) per row over contiguous keys. Decode: the paged
key cache through a block table, lengths read on the device. The plan is built (compiled)
at construction, never in a call."""
import torch

from .context import Context
from .paged_plan import PagedPlan
from .plan import TopkPlan


def rows_view(out, rows, k):
    """out[:rows, :k] (out itself when it is that shape): the part of an engine's buffer a
    call writes."""
    return out[:rows, :k] if (out.shape[0] != rows or out.shape[1] != k) else out


def key_scale_view(k_scale):
    """fp32 [N] from the forms engines keep: fp32 [N], or the uint8 [N, 4] bytes of a
    quantized cache (a view, no copy)."""
    if k_scale.dtype == torch.uint8 and k_scale.dim() == 2 and k_scale.shape[1] == 4:
        return k_scale.view(torch.float32).squeeze(-1)
    return k_scale


class PrefillIndexer:
    """heads (H), topk, head_dim (128): the plan's shape. absolute: indices are key indices
    (ks + local) instead of offsets from ks. context: a winnow.Context (default: one of its
    own on `device`). arch: the context's device when None; "sm_90a" compiles without a GPU."""

    def __init__(self, heads=64, topk=2048, head_dim=128, *, absolute=False, context=None,
                 device=0, arch=None):
        self.context = context if context is not None else Context(device)
        self.heads, self.topk, self.head_dim = heads, topk, head_dim
        self.plan = TopkPlan(self.context, score="relu_mh", heads=heads, head_dim=head_dim,
                             q_dtype="fp8_e4m3", k_dtype="fp8_e4m3", key_scale=True, k=topk,
                             window="ranges", absolute_indices=absolute,
                             arch=arch)

    def __call__(self, q, k, k_scale, weights, ks, ke, out):
        """Writes rows [0, T) of out (int32 [>= T, >= topk], rows contiguous; columns past
        topk and rows past T are left alone) through torch.ops.winnow.indexer_topk_out, on
        the current stream. Returns out."""
        torch.ops.winnow.indexer_topk_out(self.plan.id, q, k, weights, key_scale_view(k_scale),
                                          ks, ke, None, out=rows_view(out, q.shape[0],
                                                                      self.topk))
        return out


class DecodeIndexer:
    """heads (H), topk, next_n: the plan's shape; max_batch requests and max_blocks_per_seq
    block table entries (the longest request / 64) at most a call; max_total_keys: keys of
    one call's requests together (0: max_batch * max_blocks_per_seq * 64; the workspace
    holds 132 bytes each). context, device, arch: as PrefillIndexer."""

    def __init__(self, heads=64, topk=2048, next_n=1, *, max_batch, max_blocks_per_seq,
                 max_total_keys=0, context=None, device=0, arch=None):
        self.context = context if context is not None else Context(device)
        self.heads, self.topk, self.next_n = heads, topk, next_n
        self.max_batch, self.max_blocks_per_seq = max_batch, max_blocks_per_seq
        self.plan = PagedPlan(self.context, heads=heads, k=topk, next_n=next_n,
                              max_batch=max_batch, max_blocks_per_seq=max_blocks_per_seq,
                              max_total_keys=max_total_keys, arch=arch)

    def __call__(self, q, kv_cache, weights, context_lens, block_table, out, hint=None):
        """Writes rows [0, B * next_n) of out (int32 [>= B * next_n, >= topk], rows
        contiguous; the rest is left alone) through torch.ops.winnow.paged_indexer_topk_out,
        on the current stream: token positions in [0, visible), -1 padded. q fp8
        [B, next_n, H, 128], kv_cache uint8 [num_blocks, 64, 1, 132], weights fp32
        [B * next_n, H], context_lens int32 [B] or [B, next_n], block_table int32
        [B, >= max_blocks_per_seq]. hint: None, or the previous step's selection in the same
        form as out (out itself: its rows as the last call left them); exact whatever its
        rows hold. Returns out."""
        rows = q.shape[0] * self.next_n
        view = rows_view(out, rows, self.topk)
        if hint is not None:
            hint = view if hint is out else rows_view(hint, rows, self.topk)
        torch.ops.winnow.paged_indexer_topk_out(
            self.plan.id, q, kv_cache, block_table, context_lens, weights, hint, out=view)
        return out
