"""The device side that winnow takes from torch: whether a GPU is there, the current
stream, device memory for workspaces. Without torch or without a GPU, plans compile only."""


import functools


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


@functools.lru_cache(maxsize=None)
def gpu_available():
    """Asked once a process (torch.cuda.is_available() costs a microsecond a call)."""
    torch = _torch()
    return torch is not None and torch.cuda.is_available()


def current_stream(device):
    """The raw CUstream torch would launch on now for `device` (0, the NULL stream, without
    a GPU)."""
    if not gpu_available():
        return 0
    return _raw_stream()(device)


@functools.lru_cache(maxsize=None)
def _raw_stream():
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else lambda d: torch.cuda.current_stream(d).cuda_stream


def allocate(device, nbytes):
    """A uint8 device tensor of nbytes (torch's allocator aligns to 512 bytes, more than the
    256 winnowExecute asks of a workspace); None without a GPU."""
    if not gpu_available():
        return None
    import torch
    return torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device=f"cuda:{device}")
