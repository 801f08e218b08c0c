"""Torch references (CPU, float64): the scores the engines' kernels compute, materialized,
and an exact top-k with the project's order (docs/semantics.md): descending, NaN above every
number, equal scores to the smaller key index; rows with fewer than k keys padded with -1."""
import torch


def indexer_logits(q, k, k_scale, weights):
    """DeepGEMM fp8_mqa_logits' score, float64 [T, N]: sum_h w[t, h] relu(q[t, h] . k[n]),
    times k_scale[n] (the relu_mh built-in). q [T, H, d], k [N, d] (fp8 or any float)."""
    qf = q.to(torch.float32).to(torch.float64)
    kf = k.to(torch.float32).to(torch.float64)
    logits = torch.zeros(q.shape[0], k.shape[0], dtype=torch.float64)
    for h in range(q.shape[1]):  # one head at a time: T x N, not T x H x N, in memory
        logits += weights[:, h:h + 1].to(torch.float64) * (qf[:, h] @ kf.T).relu()
    if k_scale is not None:
        logits *= k_scale.to(torch.float64)[None, :]
    return logits


def inner_product_scores(q, k):
    """q . k, float64 [rows, N]."""
    return q.to(torch.float64) @ k.to(torch.float64).T


def rank_order(scores):
    """Positions of a 1-D tensor's entries, best first: NaN first, then descending, ties
    (and NaNs among themselves) by the smaller position."""
    nan = torch.isnan(scores)
    positions = torch.arange(scores.numel())
    by_value = torch.sort(torch.where(nan, 0.0, scores).to(torch.float64), descending=True,
                          stable=True).indices
    by_value = by_value[~nan[by_value]]
    return torch.cat([positions[nan], by_value])


def topk_rows(scores, k, starts=None, ends=None, *, relative=True, sorted=False):
    """int32 [rows, k]: each row's k best keys of [starts[r], ends[r]) (default: all keys),
    relative to starts[r] or absolute, in rank order or ascending (sorted=False, winnow's
    unsorted order), -1 padded."""
    rows, n = scores.shape
    out = torch.full((rows, k), -1, dtype=torch.int32)
    for r in range(rows):
        s = int(starts[r]) if starts is not None else 0
        e = int(ends[r]) if ends is not None else n
        if e <= s:
            continue
        best = rank_order(scores[r, s:e])[:k]
        if not sorted:
            best = torch.sort(best).values
        out[r, :best.numel()] = (best + (0 if relative else s)).to(torch.int32)
    return out


def vllm_prefill_topk(q, k, k_scale, weights, ks, ke, topk=2048):
    """What vLLM's prefill produces today, in winnow's order: fp8_mqa_logits, then
    top_k_per_row_prefill: int32 [T, topk], indices relative to ks, -1 padded."""
    return topk_rows(indexer_logits(q, k, k_scale, weights), topk, ks, ke, relative=True)


def sglang_ragged_topk(q, k, k_scale, weights, ks, ke, topk=2048, offsets=None):
    """SGLang's ragged prefill top-k: the local index (relative to ks) plus the row's offset
    (default ks: the index into the concatenated keys), -1 kept."""
    local = vllm_prefill_topk(q, k, k_scale, weights, ks, ke, topk)
    base = (ks if offsets is None else offsets).to(torch.int32)[:, None]
    return torch.where(local >= 0, local + base, local)


def selection_within(got, scores, k, starts=None, ends=None, *, tol=0.0, relative=True):
    """For scores that are not the kernel's own (fp8 products summed in fewer bits): each
    row of `got` picks min(k, window) distinct keys of its window, -1 after them, and no
    key left out scores more than tol above a key picked. Returns the first bad row's
    description, or None."""
    rows, n = scores.shape
    for r in range(rows):
        s = int(starts[r]) if starts is not None else 0
        e = int(ends[r]) if ends is not None else n
        want = max(0, min(k, e - s))
        row = got[r].to(torch.int64)
        picked, pads = row[:want], row[want:]
        if bool((pads != -1).any()) or bool((picked < 0).any()):
            return f"row {r}: {want} keys expected before the -1 padding, got {row.tolist()}"
        keys = picked + (s if relative else 0)
        if len(set(keys.tolist())) != want or bool((keys < s).any()) or bool((keys >= e).any()):
            return f"row {r}: picks outside [{s}, {e}) or twice"
        if want == e - s:
            continue
        window = scores[r, s:e]
        chosen = torch.zeros(e - s, dtype=torch.bool)
        chosen[keys - s] = True
        if float(window[~chosen].max()) > float(window[chosen].min()) + tol:
            return (f"row {r}: a key left out scores {float(window[~chosen].max())}, above the "
                    f"lowest picked {float(window[chosen].min())} + {tol}")
    return None
