"""winnow: fused score + top-k GPU kernels generated at run time, from Python.

The C library through ctypes (winnow.Context, TopkPlan, BlockPlan, PagedPlan, MergePlan;
errors as WinnowError with the C message) works without torch; with torch, the ops of the `winnow` namespace
(torch.ops.winnow.*), the sharded top-k over torch.distributed (winnow.ShardedTopk) and
the engine adapters (winnow.vllm, winnow.sglang) come too.
fast_ops_loaded() says whether the hot ops run as C++ kernels (the torch extension
libwinnow_torch.so) or as Python over ctypes; fast_ops_status() says which and why."""
from ._capi import library_path, version
from ._fast_ops import loaded as fast_ops_loaded
from ._fast_ops import status as fast_ops_status
from .block_plan import BlockPlan, block_rule
from .context import Context
from .errors import (CompileError, CudaError, InternalError, InvalidArgument, NoDevice,
                     NotBuilt, NotSupported, WinnowError, WorkspaceTooSmall)
from .merge_plan import MergePlan
from .paged_plan import PagedPlan
from .plan import TopkPlan

try:
    import torch  # noqa: F401
except ImportError:
    has_torch = False
else:
    has_torch = True
    from .ops import (block_attention, block_select, indexer_topk, knn, paged_indexer_topk,
                      stream_topk)
    from .sharded import ShardedTopk

__version__ = "%d.%d.%d" % version()
