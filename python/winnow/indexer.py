"""The lightning indexer's prefill top-k over per-row key windows, the core of the engine
adapters (winnow.vllm, winnow.sglang): relu_mh with fp8 q and k and a per-key fp32 scale,
window [ks[t], ke[t]) per row, k best keys per row, -1 padded. The plan is built (compiled)
at construction, never in a call."""
import torch

from .context import Context
from .plan import TopkPlan


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
        T = q.shape[0]
        view = out[:T, :self.topk] if (out.shape[0] != T or out.shape[1] != self.topk) else out
        torch.ops.winnow.indexer_topk_out(self.plan.id, q, k, weights, key_scale_view(k_scale),
                                          ks, ke, None, out=view)
        return out
