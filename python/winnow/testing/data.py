"""Inputs whose scores every kernel computes exactly: small integers in q, k and the weights
and powers of two in the key scales, so that every product and partial sum is an integer
below 2^24 (exact in fp32 and in the fp8 tensor cores' narrower sums) whatever the
summation order, and so the top-k is exactly the reference's, ties (many) included."""
import torch


def small_ints(shape, low, high, generator, dtype, device):
    x = torch.randint(low, high + 1, shape, generator=generator, dtype=torch.int32)
    return x.to(torch.float32).to(dtype).to(device)


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
