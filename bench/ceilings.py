#!/usr/bin/env python3
"""Measures the device ceilings `winnow bench --ceilings FILE` divides by, on the same GPU
in the same run as the benchmark (PERF.md: re-measure them when you quote a ratio to them).

    python3 bench/ceilings.py OUT.json

Writes {"copy_tbps", "bf16_tflops", "fp8_tflops", "gpu", "date"}; a measurement that
fails is written as null (winnow bench then uses PERF.md's published value for it).
All times: CUDA events, after warm-up, median of 10.
"""
import datetime
import json
import statistics
import sys
import traceback

import torch

from cuda_timing import times_ms

WARMUP = 3
REPEATS = 10


def median_ms(fn):
    """Median time of fn() in ms."""
    return statistics.median(times_ms(fn, WARMUP, REPEATS))


def copy_tbps():
    """Device-to-device copy of 4 GiB: bytes read + bytes written per second."""
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    src.random_(0, 256)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * n / (ms * 1e-3) / 1e12


def bf16_tflops(n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b))
    return 2 * n**3 / (ms * 1e-3) / 1e12


def fp8_tflops(n=8192):
    """fp8 e4m3 GEMM through torch._scaled_mm (B column-major: b.t() of a row-major
    [N, K] tensor), unit scales, bf16 output."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    ms = median_ms(
        lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    )
    return 2 * n**3 / (ms * 1e-3) / 1e12


def measure(name, fn):
    try:
        value = round(fn(), 3)
        print(f"{name}: {value}", flush=True)
        return value
    except Exception:  # one failed measurement must not lose the others
        print(f"{name}: failed", file=sys.stderr)
        traceback.print_exc()
        return None
    finally:
        torch.cuda.empty_cache()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = {
        "copy_tbps": measure("copy_tbps", copy_tbps),
        "bf16_tflops": measure("bf16_tflops", bf16_tflops),
        "fp8_tflops": measure("fp8_tflops", fp8_tflops),
        "gpu": torch.cuda.get_device_name(0),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
        f.write("\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
