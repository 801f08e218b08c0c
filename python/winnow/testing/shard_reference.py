"""The sharded top-k's references (CPU): each shard's lists as a rank's top-k writes them
(global indices, scores, -1 padding), and the exact merge of R lists per row (the rule of
testing/shard_reference.h): NaN first, then descending, ties to the smaller index; -1 entries
are absent; fewer than k keys pad with -1."""
import torch

from .reference import rank_order


def shard_lists(scores, k, shards, *, sorted=False):
    """(indices int32, scores fp32) [R, rows, k]: shard r = (offset, count) of the keys'
    columns of scores [rows, total_keys], its top k per row in global key numbers, -1 padded
    (score -inf), best first or ascending index."""
    rows = scores.shape[0]
    indices = torch.full((len(shards), rows, k), -1, dtype=torch.int32)
    values = torch.full((len(shards), rows, k), float("-inf"), dtype=torch.float32)
    for r, (offset, count) in enumerate(shards):
        for row in range(rows):
            part = scores[row, offset:offset + count]
            best = rank_order(part)[:k]
            if not sorted:
                best = torch.sort(best).values
            indices[r, row, :best.numel()] = (best + offset).to(torch.int32)
            values[r, row, :best.numel()] = part[best].to(torch.float32)
    return indices, values


def merge_lists(indices, scores, k, *, sorted=False):
    """(indices int32, scores fp32) [rows, k]: the top k per row of R lists [R, rows, k]
    (ranked by score, ties and NaNs to the smaller index), best first or ascending index."""
    ranks, rows, _ = indices.shape
    out = torch.full((rows, k), -1, dtype=torch.int32)
    out_scores = torch.full((rows, k), float("-inf"), dtype=torch.float32)
    for row in range(rows):
        keys = indices[:, row].reshape(-1)
        vals = scores[:, row].reshape(-1)
        present = keys >= 0
        keys, vals = keys[present], vals[present]
        by_index = torch.sort(keys, stable=True).indices
        keys, vals = keys[by_index], vals[by_index]
        best = rank_order(vals)[:k]
        if not sorted:
            best = best[torch.sort(keys[best]).indices]
        out[row, :best.numel()] = keys[best]
        out_scores[row, :best.numel()] = vals[best]
    return out, out_scores
