"""Inputs whose scores every kernel computes exactly: small integers in q, k and the weights
and powers of two in the key scales, so that every product and partial sum is an integer
below 2^24 (exact in fp32 and in the fp8 tensor cores' narrower sums) whatever the
summation order, and so the top-k is exactly the reference's, ties (many) included."""
import torch


def small_ints(shape, low, high, generator, dtype, device):
    x = torch.randint(low, high + 1, shape, generator=generator, dtype=torch.int32)
    return x.to(torch.float32).to(dtype).to(device)


def small_int_corpus(seed, device="cpu", rows=16, keys=20000, d=64):
    """fp16 queries [rows, d] and keys [keys, d] of small integers in -3..3 (exact scores)."""
    g = torch.Generator().manual_seed(seed)
    return (small_ints((rows, d), -3, 3, g, torch.float16, "cpu").to(device),
            small_ints((keys, d), -3, 3, g, torch.float16, "cpu").to(device))


def indexer_inputs(T, H, N, *, d=128, seed=0, device="cpu", ranges=True):
    """vLLM's prefill formats with exact scores: q [T, H, d] fp8, k [N, d] fp8, k_scale [N]
    fp32 (1/2, 1, 2), weights [T, H] fp32 in -2..2, ks/ke int32 [T] (random windows, some
    shorter than 2048, some empty; dense when ranges=False)."""
    g = torch.Generator().manual_seed(seed)
    fp8 = torch.float8_e4m3fn
    q = small_ints((T, H, d), -2, 2, g, fp8, device)
    k = small_ints((N, d), -2, 2, g, fp8, device)
    k_scale = (2.0 ** torch.randint(-1, 2, (N,), generator=g).to(torch.float32)).to(device)
    weights = small_ints((T, H), -2, 2, g, torch.float32, device)
    if ranges:
        ks = torch.randint(0, max(N // 2, 1), (T,), generator=g, dtype=torch.int32)
        ke = torch.minimum(ks + torch.randint(0, N, (T,), generator=g, dtype=torch.int32),
                           torch.tensor(N, dtype=torch.int32))
        ks[0], ke[0] = 5, 5  # an empty window: all -1
    else:
        ks = torch.zeros(T, dtype=torch.int32)
        ke = torch.full((T,), N, dtype=torch.int32)
    return q, k, k_scale, weights, ks.to(device), ke.to(device)


def paged_inputs(lens, *, next_n=1, H=64, max_blocks=None, seed=0, levels=2, nan_keys=0,
                 lens_per_query=False, device="cpu"):
    """vLLM's decode formats with exact scores (integers in -levels..levels, heavy ties at
    small levels): q [B, next_n, H, 128] fp8, kv_cache uint8 [num_blocks, 64, 1, 132] (keys
    then fp32 scales 1/2, 1, 2 per block), weights [B * next_n, H] fp32, context_lens int32
    [B] (or [B, next_n]: the last query sees lens[b], the others a random count up to it),
    block_table int32 [B, max_blocks]: each request's blocks distinct and shuffled over the
    cache, -1 past its length. nan_keys: that many keys get a NaN first element. lens: one
    length per request."""
    from .reference import PAGE_DIM, PAGE_KEYS
    g = torch.Generator().manual_seed(seed)
    fp8 = torch.float8_e4m3fn
    B = len(lens)
    pages = [(max(n, 0) + PAGE_KEYS - 1) // PAGE_KEYS for n in lens]
    if max_blocks is None:
        max_blocks = max(max(pages), 1)
    num_blocks = sum(pages) + 3  # a few blocks no request names
    keys = small_ints((num_blocks * PAGE_KEYS, PAGE_DIM), -levels, levels, g, fp8, "cpu")
    if nan_keys:
        picked = torch.randperm(keys.shape[0], generator=g)[:nan_keys]
        keys[picked, 0] = float("nan")
    scales = 2.0 ** torch.randint(-1, 2, (num_blocks, PAGE_KEYS), generator=g).float()
    cache = torch.cat([keys.view(torch.uint8).reshape(num_blocks, -1),
                       scales.view(torch.uint8).reshape(num_blocks, -1)], dim=1)
    cache = cache.reshape(num_blocks, PAGE_KEYS, 1, PAGE_DIM + 4)
    order = torch.randperm(num_blocks, generator=g).to(torch.int32)
    table = torch.full((B, max_blocks), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used:used + n]
        used += n
    q = small_ints((B, next_n, H, PAGE_DIM), -levels, levels, g, fp8, "cpu")
    weights = small_ints((B * next_n, H), -2, 2, g, torch.float32, "cpu")
    context_lens = torch.tensor(lens, dtype=torch.int32)
    if lens_per_query:
        per = torch.stack([torch.randint(0, max(n, 0) + 1, (next_n,), generator=g) for n in lens])
        per[:, -1] = context_lens
        context_lens = per.to(torch.int32)
    return tuple(t.to(device) for t in (q, cache, weights, context_lens, table))
