#!/usr/bin/env python3
"""Dense causal attention with torch SDPA for `winnow bench block-select --dense FILE`:
the baseline of PERF.md's block-select rows (32 query heads / 8 KV heads, d = 128, bf16,
causal), timed on the same GPU in the same run as the benchmark.

    python3 bench/sdpa_dense.py OUT.jsonl [L ...]     (default L: 4K 16K 64K 128K 256K)

Writes one PERF.md record per L (workload "block-select", impl "torch", params.L, ...).
The backend is cuDNN (PERF.md's "dense = cuDNN SDPA") with k and v repeated to the query
heads (GQA by repeat_interleave, the copy not timed); when cuDNN refuses, flash attention
with enable_gqa, then whatever SDPA picks. Each record names the backend used.
Times: CUDA events, after warm-up (2 calls and at least 300 ms of calls), median of 10
(about 30 s in all at 256K).
"""
import datetime
import json
import statistics
import subprocess
import sys
import traceback

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import times_ms

HEADS, KV_HEADS, DIM = 32, 8, 128
WARMUP = 2
# Untimed calls until this long before each series, as `winnow bench block-select
# --warmup-ms` does by default: both sides timed at the clocks the GPU holds under load.
WARMUP_MS = 300


def median_ms(fn, repeats):
    times = times_ms(fn, WARMUP, repeats, WARMUP_MS)
    return statistics.median(times), min(times), max(times)


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def attempts(q, k, v):
    """(backend name, extra bytes, callable) in order of preference."""
    F = torch.nn.functional
    group = HEADS // KV_HEADS

    def cudnn():
        kr = k.repeat_interleave(group, dim=1)
        vr = v.repeat_interleave(group, dim=1)

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        return run, kr.numel() * 2 * 2

    def flash():
        def run():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return run, 0

    def default():
        def run():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return run, 0

    return [("cudnn", cudnn), ("flash", flash), ("default", default)]


def measure(L):
    torch.manual_seed(L)
    q = torch.randn(1, HEADS, L, DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, KV_HEADS, L, DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, KV_HEADS, L, DIM, device="cuda", dtype=torch.bfloat16)
    repeats = 10
    for name, make in attempts(q, k, v):
        try:
            run, extra = make()
            run()
            torch.cuda.synchronize()
            med, lo, hi = median_ms(run, repeats)
            return name, extra, med, lo, hi, repeats
        except Exception:
            print(f"L={L}: SDPA backend {name} failed, trying the next", file=sys.stderr)
            traceback.print_exc()
            torch.cuda.empty_cache()
    raise RuntimeError(f"L={L}: no SDPA backend ran")


def parse_size(s):
    s = s.strip()
    scale = {"K": 1 << 10, "k": 1 << 10, "M": 1 << 20, "m": 1 << 20}.get(s[-1:], 1)
    return int(s[:-1] if scale > 1 else s) * scale


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    sizes = [parse_size(s) for s in sys.argv[2:]] or [4096, 16384, 65536, 131072, 262144]
    gpu = torch.cuda.get_device_name(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    rev = commit()
    with open(sys.argv[1], "w") as f:
        for L in sizes:
            try:
                name, extra, med, lo, hi, repeats = measure(L)
            except Exception:
                traceback.print_exc()
                continue
            finally:
                torch.cuda.empty_cache()
            flop = 4.0 * DIM * HEADS * L * (L + 1) / 2  # causal pairs, QK^T and PV
            rec = {
                "workload": "block-select", "impl": "torch",
                "params": {"L": L, "heads": HEADS, "kv_heads": KV_HEADS, "d": DIM,
                           "alpha": None, "input": "random"},
                "ms_median": round(med, 4), "ms_min": round(lo, 4), "ms_max": round(hi, 4),
                "tflops": round(flop / med / 1e9, 2), "gbps": 0, "floor_ms": None,
                "ratio_to_floor": None, "extra_mem_bytes": extra, "exact": None,
                "fallbacks": 0, "backend": name, "torch": torch.__version__,
                "repeats": repeats, "warmup": WARMUP, "warmup_ms": WARMUP_MS, "gpu": gpu, "commit": rev, "date": date,
            }
            line = json.dumps(rec)
            print(line, flush=True)
            f.write(line + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
