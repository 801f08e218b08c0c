"""winnow: fused score + top-k GPU kernels generated at run time, from Python.

The C library through ctypes (winnow.Context, TopkPlan, BlockPlan; errors as WinnowError
with the C message) works without torch; with torch, the ops of the `winnow` namespace
(torch.ops.winnow.*) and the engine adapters (winnow.vllm, winnow.sglang) come too."""
from ._capi import library_path, version
from .block_plan import BlockPlan, block_rule
from .context import Context
from .errors import (CompileError, CudaError, InternalError, InvalidArgument, NoDevice,
                     NotBuilt, NotSupported, WinnowError, WorkspaceTooSmall)
from .plan import TopkPlan

try:
    import torch  # noqa: F401
except ImportError:
    has_torch = False
else:
    has_torch = True
    from .ops import block_attention, block_select, indexer_topk, knn, stream_topk

__version__ = "%d.%d.%d" % version()
