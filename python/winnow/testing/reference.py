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


PAGE_KEYS, PAGE_DIM = 64, 128  # the engines' paged cache: 64 keys a block, 128 fp8 bytes each


def paged_keys(kv_cache):
    """(keys fp8 [num_blocks, 64, 128], scales fp32 [num_blocks, 64]) of the engines' paged
    cache uint8 [num_blocks, 64, 1, 132]: per block 64 x 128 fp8 bytes, then 64 fp32."""
    blocks = kv_cache.reshape(kv_cache.shape[0], -1)
    keys = blocks[:, :PAGE_KEYS * PAGE_DIM].contiguous().view(torch.float8_e4m3fn)
    scales = blocks[:, PAGE_KEYS * PAGE_DIM:].contiguous().view(torch.float32)
    return keys.reshape(-1, PAGE_KEYS, PAGE_DIM), scales


def paged_visible(context_lens, next_n):
    """int64 [B, next_n]: keys query j of request b sees (templates/paged/paged_cache.cuh): with
    lens [B], len - next_n + 1 + j; with [B, next_n], lens[b, j]; never below 0."""
    lens = context_lens.to(torch.int64)
    if lens.dim() == 2:
        return lens.clamp(min=0)
    return (lens[:, None] - next_n + 1 + torch.arange(next_n)[None, :]).clamp(min=0)


def paged_decode_logits(q, kv_cache, weights, context_lens, block_table, *,
                        max_blocks_per_seq=None, max_total_keys=None):
    """The decode indexer's logits as fp8_paged_mqa_logits computes them, float64
    [B * next_n, width] (width: the longest visible count), with each row's visible count
    int64 [B * next_n]: keys gathered through the block table, relu_mh with the key scale.
    A bad request (a length below 0 or above max_blocks_per_seq * 64, a block outside the
    cache, or keys past max_total_keys summed over the requests before it) sees nothing,
    as the op's rows of it are all -1. max_blocks_per_seq: the block table's width when
    None."""
    B, next_n = q.shape[0], q.shape[1]
    keys, scales = paged_keys(kv_cache)
    max_keys = PAGE_KEYS * (block_table.shape[1] if max_blocks_per_seq is None
                            else max_blocks_per_seq)
    lens = context_lens.to(torch.int64)
    visible = paged_visible(lens, next_n)
    width = int(visible.max()) if visible.numel() else 0
    logits = torch.zeros(B * next_n, width, dtype=torch.float64)
    ends = torch.zeros(B * next_n, dtype=torch.int64)
    packed = 0
    for b in range(B):
        n = int(lens[b].max()) if lens.dim() == 2 else int(lens[b])
        bad = n < 0 or n > max_keys or bool((lens[b] < 0).any())
        n = 0 if bad else n
        blocks = block_table[b, :(n + PAGE_KEYS - 1) // PAGE_KEYS].to(torch.int64)
        bad = bad or bool(((blocks < 0) | (blocks >= keys.shape[0])).any())
        bad = bad or (max_total_keys is not None and packed + n > max_total_keys)
        if bad:
            continue
        packed += n
        t = torch.arange(n)
        k = keys[blocks[t // PAGE_KEYS], t % PAGE_KEYS]
        s = scales[blocks[t // PAGE_KEYS], t % PAGE_KEYS]
        rows = slice(b * next_n, (b + 1) * next_n)
        logits[rows, :n] = indexer_logits(q[b], k, s, weights[rows])
        ends[rows] = visible[b]
    return logits, ends


def paged_decode_topk(q, kv_cache, weights, context_lens, block_table, topk=2048, *,
                      sorted=False, **bad_request_limits):
    """What fp8_paged_mqa_logits + a decode top-k give, in winnow's order: int32
    [B * next_n, topk] token positions in [0, visible), -1 padded (rows of a bad request:
    all -1; bad_request_limits: paged_decode_logits' keywords)."""
    logits, ends = paged_decode_logits(q, kv_cache, weights, context_lens, block_table,
                                       **bad_request_limits)
    return topk_rows(logits, topk, None, ends, sorted=sorted)
