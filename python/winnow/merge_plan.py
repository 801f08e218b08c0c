"""winnow.MergePlan: one winnowMergePlan_t, the exact merge of sharded top-k lists
(ops/shard/shard_merge.h), with its workspace. Compiling happens at build (in the constructor unless
build=False), never in a call; a call launches on the current torch stream, allocates
nothing and does not synchronise the host. A plan, with its workspace, serves one stream at
a time."""
import ctypes

from . import _capi
from ._plan_handle import PlanHandle

_INDICES, _SCORES, _OUT, _OUT_SCORES = range(4)


class MergePlan(PlanHandle):
    """Mirrors winnowMergeDesc_t: ranks (R, 1..1024), k (1..8192; the top-k plans' k),
    max_rows (rows per call at most, required), sorted (rows best first; False: ascending
    index, as TopkPlan's sorted=False), arch (None: the context's device). workspace: a
    uint8 CUDA tensor of at least workspace_size bytes (256 + max_rows k 8 (ranks + 1)),
    256-byte aligned; None allocates one at build (with a GPU)."""

    _kind = "MergePlan"
    _destroy = staticmethod(lambda h: _capi.lib.winnowMergePlanDestroy(h))
    _build_plan = _capi.lib.winnowMergePlanBuild
    _get_workspace_size = _capi.lib.winnowMergePlanGetWorkspaceSize
    # [0] rows whose lists held one key twice (overlapping shards), [1] entries below -1
    _get_counter_offset = _capi.lib.winnowMergePlanGetCounterOffset

    def __init__(self, context, *, ranks, max_rows, k=2048, sorted=False, arch=None,
                 workspace=None, build=True):
        self.context = context
        self._handle = None
        desc = _capi.MergeDesc()
        _capi.lib.winnowMergeDescInit(ctypes.byref(desc))
        desc.ranks, desc.k, desc.max_rows, desc.sorted = ranks, k, max_rows, 1 if sorted else 0
        self._arch = arch.encode() if arch else None
        desc.arch = self._arch
        self.desc = desc
        self.ranks, self.k, self.max_rows, self.sorted = ranks, k, max_rows, bool(sorted)
        self._create(context, _capi.lib.winnowMergePlanCreate, desc, 4, build, workspace)

    def merge_gathered(self, indices, scores, *, out, out_scores=None, stream=None):
        """winnowShardMerge without an all-gather (loopback): every rank's lists already here.
        indices int32 and scores fp32 [ranks, rows, k] (rows contiguous, strided views
        allowed: rank and row strides); out int32 [rows, k], out_scores fp32 [rows, k] or
        None. The top k of the R lists per row, equal to one plan over all keys."""
        s = self._slots
        s.set(_INDICES, indices, "indices")
        s.set(_SCORES, scores, "scores")
        s.set(_OUT, out, "out")
        s.set(_OUT_SCORES, out_scores, "out_scores")
        self._launch(_capi.lib.winnowShardMerge, s.at(_INDICES), s.at(_SCORES), None, None,
                     s.at(_OUT), s.at(_OUT_SCORES) if out_scores is not None else None,
                     stream=stream)
