"""CUDA-event timing shared by the bench scripts (PERF.md: after warm-up, CUDA events)."""
import torch


def times_ms(fn, warmup, repeats):
    """`warmup` untimed calls of fn(), then the times in ms of `repeats` calls, each
    between two CUDA events."""
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
