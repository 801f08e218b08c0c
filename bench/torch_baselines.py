#!/usr/bin/env python3
"""Times the PyTorch baselines `winnow bench --baselines FILE` reports beside winnow, in
the same run (PERF.md, "Baselines to run beside winnow").

    python3 bench/torch_baselines.py OUT.json [--topk RxTxK,...] [--knn BxNxDxK,...]
                                     [--decode LENS:NEXT_N:K,...]

--topk R x T x K: torch.topk(K) over an R x T fp32 logits matrix (the second half of the
    "materialize" baseline: winnow's score-only kernel writes those logits, the bench adds
    its own measured time to this one). Key "topk_ms:RxTxK".
--knn B x N x D x K: plain PyTorch retrieval, fp16: q[B, D] @ corpus[N, D].T (fp16 logits)
    then torch.topk(K) along N. Keys "knn_ip_ms:BxNxDxK" and "knn_l2_ms:BxNxDxK" (l2: the
    same matmul, then -(|k|^2 - 2 q.k) with stored |k|^2, then topk: the usual torch form).
--decode LENS:NEXT_N:K (LENS: COUNTxLEN joined by '+', as `winnow bench dsa-decode` labels
    its shapes, e.g. 64x65536 or 63x1024+1x1048576): the paged decode indexer in plain
    PyTorch over the engines' cache uint8 [blocks, 64, 1, 132] (keys gathered through the
    block table per request, fp32 relu_mh with the key scales into [B * next_n, max_len]
    logits masked past each query's length, then torch.topk(K)). Key
    "decode_torch_ms:LENS:NEXT_N:K"; also "topk_ms:RxTxK" for R = B * next_n, T = max_len,
    and "topk_graph_ms:RxTxK", the same torch.topk captured in a CUDA graph and replayed
    (the top-k half of materialize + torch.topk).

Each value is the median of REPEATS runs between CUDA events, after WARMUP runs; a size
that fails (out of memory) is written as null with the error beside it. Progress lines
go to stderr. The inputs are N(0, 1) random: torch.topk's time depends on the sizes, not
on the values.
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from cuda_timing import times_ms

WARMUP = 2
REPEATS = 5


def median_ms(fn):
    return statistics.median(times_ms(fn, WARMUP, REPEATS))


def sizes(arg, n):
    out = []
    for item in filter(None, (arg or "").split(",")):
        parts = item.lower().split("x")
        if len(parts) != n:
            sys.exit(f"torch_baselines: '{item}' is not {n} sizes joined by 'x'")
        out.append(tuple(int(float(p[:-1]) * 1024 if p.endswith("k") else
                             float(p[:-1]) * 1048576 if p.endswith("m") else p)
                         for p in parts))
    return out


def topk_ms(rows, cols, k):
    logits = torch.randn(rows, cols, device="cuda", dtype=torch.float32)
    # k past the row (decode's short requests): torch.topk refuses it, the op pads with -1.
    ms = median_ms(lambda: torch.topk(logits, min(k, cols), dim=1, sorted=False))
    del logits
    return ms


def topk_graph_ms(rows, cols, k):
    """torch.topk of a [rows, cols] fp32 matrix captured in a CUDA graph and replayed (as an
    engine's decode step runs): the top-k half of materialize + torch.topk under graphs."""
    logits = torch.randn(rows, cols, device="cuda", dtype=torch.float32)
    kk = min(k, cols)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(2):
            torch.topk(logits, kk, dim=1, sorted=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.topk(logits, kk, dim=1, sorted=False)
    ms = median_ms(graph.replay)
    del graph, logits
    return ms


def knn_ms(batch, n, d, k):
    q = torch.randn(batch, d, device="cuda", dtype=torch.float16)
    corpus = torch.randn(n, d, device="cuda", dtype=torch.float16)
    ksq = (corpus.float() ** 2).sum(dim=1).half()
    ip = median_ms(lambda: torch.topk(q @ corpus.T, k, dim=1, sorted=False))
    l2 = median_ms(lambda: torch.topk(2 * (q @ corpus.T) - ksq, k, dim=1, sorted=False))
    del q, corpus, ksq
    return ip, l2


def decode_lens(spec):
    """'63x1024+1x1048576' -> [1024] * 63 + [1048576]."""
    lens = []
    for part in spec.split("+"):
        count, length = sizes(part, 2)[0]
        lens += [length] * count
    return lens


def decode_torch_ms(lens, next_n, k, heads=64):
    """torch-only decode: per request, its pages gathered from the cache, fp8 keys and
    scales decoded, sum_h w relu(q . k) * scale, masked, then topk over [rows, max_len]."""
    pages = [(n + 63) // 64 for n in lens]
    cache = torch.randint(0, 120, (sum(pages), 64, 1, 132), dtype=torch.uint8, device="cuda")
    flat = cache.view(cache.shape[0], -1)
    flat[:, 8192:] = torch.ones(cache.shape[0], 64, device="cuda").view(torch.uint8)
    table = torch.randperm(sum(pages), device="cuda", dtype=torch.int64).to(torch.int32)
    starts = [sum(pages[:b]) for b in range(len(lens))]
    B, width = len(lens), max(lens)
    q = torch.randn(B, next_n, heads, 128, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(B * next_n, heads, device="cuda")
    logits = torch.empty(B * next_n, width, device="cuda")
    pos = torch.arange(width, device="cuda")

    def call():
        logits.fill_(float("-inf"))
        for b, n in enumerate(lens):
            blocks = flat[table[starts[b]:starts[b] + pages[b]].long()]
            keys = blocks[:, :8192].reshape(-1, 128)[:n].view(torch.float8_e4m3fn).float()
            scale = blocks[:, 8192:].reshape(-1, 4)[:n].view(torch.float32).squeeze(1)
            s = torch.einsum("jhd,nd->jhn", q[b].float(), keys).relu_()
            s = torch.einsum("jh,jhn->jn", w[b * next_n:(b + 1) * next_n], s) * scale
            seen = n - next_n + 1 + torch.arange(next_n, device="cuda")
            logits[b * next_n:(b + 1) * next_n, :n] = s.masked_fill(pos[None, :n] >= seen[:, None],
                                                                  float("-inf"))
        return torch.topk(logits, min(k, width), dim=1, sorted=False)

    ms = median_ms(call)
    del cache, logits
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--topk", help="RxTxK,... (fp32 logits)")
    ap.add_argument("--knn", help="BxNxDxK,... (fp16 corpus)")
    ap.add_argument("--decode", help="LENS:NEXT_N:K,... (paged decode, LENS as 63x1K+1x1M)")
    args = ap.parse_args()
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": datetime.date.today().isoformat(), "warmup": WARMUP, "repeats": REPEATS}

    def measure(key, fn):
        t0 = time.time()
        try:
            value = fn()
        except Exception as e:  # out of memory on a large size: recorded, not fatal
            result[key] = None
            result[key + ":error"] = str(e).splitlines()[0][:200]
            print(f"torch_baselines: {key}: failed: {result[key + ':error']}", file=sys.stderr)
        else:
            print(f"torch_baselines: {key}: {value} ({time.time() - t0:.1f} s)", file=sys.stderr)
            return value
        finally:
            torch.cuda.empty_cache()

    for r, t, k in sizes(args.topk, 3):
        result[f"topk_ms:{r}x{t}x{k}"] = measure(f"topk_ms:{r}x{t}x{k}",
                                                 lambda: topk_ms(r, t, k))
    for b, n, d, k in sizes(args.knn, 4):
        name = f"{b}x{n}x{d}x{k}"
        both = measure(f"knn_ms:{name}", lambda: knn_ms(b, n, d, k))
        result[f"knn_ip_ms:{name}"], result[f"knn_l2_ms:{name}"] = both or (None, None)
    for spec in filter(None, (args.decode or "").split(",")):
        parts = spec.split(":")
        if len(parts) != 3:
            sys.exit(f"torch_baselines: '{spec}' is not LENS:NEXT_N:K")
        lens, next_n, k = decode_lens(parts[0]), int(parts[1]), int(parts[2])
        label = "+".join(f"{c}x{n}" for c, n in sizes(parts[0].replace("+", ","), 2))
        key = f"decode_torch_ms:{label}:{next_n}:{k}"
        result[key] = measure(key, lambda: decode_torch_ms(lens, next_n, k))
        rows, width = len(lens) * next_n, max(lens)
        topk_key = f"topk_ms:{rows}x{width}x{k}"
        if topk_key not in result:
            result[topk_key] = measure(topk_key, lambda: topk_ms(rows, width, k))
        graph_key = f"topk_graph_ms:{rows}x{width}x{k}"
        if graph_key not in result:
            result[graph_key] = measure(graph_key, lambda: topk_graph_ms(rows, width, k))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
