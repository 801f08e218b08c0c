#!/usr/bin/env python3
"""Times the PyTorch baselines `winnow bench --baselines FILE` reports beside winnow, in
the same visit (PERF.md, "Baselines to run beside winnow").

    python3 bench/torch_baselines.py OUT.json [--topk RxTxK,...] [--knn BxNxDxK,...]

--topk R x T x K: torch.topk(K) over an R x T fp32 logits matrix (the second half of the
    "materialize" baseline: winnow's score-only kernel writes those logits, the bench adds
    its own measured time to this one). Key "topk_ms:RxTxK".
--knn B x N x D x K: plain PyTorch retrieval, fp16: q[B, D] @ corpus[N, D].T (fp16 logits)
    then torch.topk(K) along N. Keys "knn_ip_ms:BxNxDxK" and "knn_l2_ms:BxNxDxK" (l2: the
    same matmul, then -(|k|^2 - 2 q.k) with stored |k|^2, then topk: the usual torch form).

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
    ms = median_ms(lambda: torch.topk(logits, k, dim=1, sorted=False))
    del logits
    return ms


def knn_ms(batch, n, d, k):
    q = torch.randn(batch, d, device="cuda", dtype=torch.float16)
    corpus = torch.randn(n, d, device="cuda", dtype=torch.float16)
    ksq = (corpus.float() ** 2).sum(dim=1).half()
    ip = median_ms(lambda: torch.topk(q @ corpus.T, k, dim=1, sorted=False))
    l2 = median_ms(lambda: torch.topk(2 * (q @ corpus.T) - ksq, k, dim=1, sorted=False))
    del q, corpus, ksq
    return ip, l2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--topk", help="RxTxK,... (fp32 logits)")
    ap.add_argument("--knn", help="BxNxDxK,... (fp16 corpus)")
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
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
