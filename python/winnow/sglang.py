"""SGLang's ragged prefill format: each request's keys concatenated into one
k [N, 128] fp8 with k_scale [N] fp32, q [T, H, 128] fp8, weights [T, H] fp32, ks / ke int32
[T] (the row's window in the concatenation); the ragged top-k returns the local index plus
an offset per row: by default ks, so the result indexes the concatenated keys directly
(winnow writes absolute indices, no extra pass), -1 padded."""
import torch

from .indexer import PrefillIndexer


class RaggedIndexer:
    """heads, topk, head_dim: the plan's shape; built (compiled) here."""

    def __init__(self, heads=64, topk=2048, head_dim=128, *, context=None, device=0,
                 arch=None):
        self.indexer = PrefillIndexer(heads, topk, head_dim, absolute=True, context=context,
                                      device=device, arch=arch)

    def __call__(self, q, k, k_scale, weights, ks, ke, out=None, offsets=None):
        """int32 [T, topk]: local index + offsets[t] (offsets None: + ks[t]), -1 kept. out:
        the caller's buffer (rows [0, T) written), else a new tensor."""
        T = q.shape[0]
        if out is None:
            out = torch.empty((T, self.indexer.topk), dtype=torch.int32, device=q.device)
        self.indexer(q, k, k_scale, weights, ks, ke, out)
        if offsets is not None:  # absolute - ks + offsets, on the picked entries only
            rows = out[:T, :self.indexer.topk]
            shift = (offsets.to(torch.int32) - ks)[:, None]
            rows.add_(torch.where(rows >= 0, shift, torch.zeros_like(shift)))
        return out
