"""CUDA-event timing shared by the bench scripts (PERF.md: after warm-up, CUDA events)."""
import torch


def times_ms(fn, warmup, repeats, warmup_ms=0):
    """`warmup` untimed calls of fn() (and more until `warmup_ms` of them have run: the GPU
    then runs at the clocks it holds under this load), then the times in ms of `repeats`
    calls, each between two CUDA events."""
    import time
    start = time.monotonic()
    while (time.monotonic() - start) * 1e3 < warmup_ms:
        fn()
        torch.cuda.synchronize()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times
