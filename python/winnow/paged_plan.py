"""winnow.PagedPlan: one winnowPagedPlan_t, the decode indexer top-k over the engines' paged
fp8 key cache (ops/paged/paged_topk.h), with its workspace. Compiling happens at build (in the
constructor unless build=False), never in a call; a call reads the lengths and the block
table on the device only, so it can be captured at max_batch and replayed for any lengths.
A plan, with its workspace, serves one stream at a time."""
import ctypes

from . import _capi
from ._plan_handle import PlanHandle

_Q, _CACHE, _TABLE, _LENS, _WEIGHTS, _OUT, _HINT = range(7)


class PagedPlan(PlanHandle):
    """Mirrors winnowPagedDesc_t: heads (64), k (1..8192; 2048), next_n (1..4), max_batch
    (requests per call at most), max_blocks_per_seq (the longest request / 64, required),
    max_total_keys (keys of one call's requests together; 0: max_batch *
    max_blocks_per_seq * 64), sorted, key_splits, arch; expression="..." for a text score
    instead of relu_mh with the cache's key scale. The workspace holds max_total_keys * 132
    bytes besides the top-k's (workspace_size). workspace: a uint8 CUDA tensor of at least
    workspace_size bytes, 256-byte aligned; None allocates one at build (with a GPU)."""

    _kind = "PagedPlan"
    _destroy = staticmethod(lambda h: _capi.lib.winnowPagedPlanDestroy(h))
    _build_plan = _capi.lib.winnowPagedPlanBuild  # compiles both modules
    _get_workspace_size = _capi.lib.winnowPagedPlanGetWorkspaceSize
    _get_counter_offset = _capi.lib.winnowPagedPlanGetCounterOffset  # fallback rows, bad requests' rows

    def __init__(self, context, *, max_blocks_per_seq, heads=64, k=2048, next_n=1,
                 max_batch=1, max_total_keys=0, sorted=False, key_splits=0, expression=None,
                 arch=None, workspace=None, build=True):
        self.context = context
        self._handle = None
        desc = _capi.PagedDesc()
        _capi.lib.winnowPagedDescInit(ctypes.byref(desc))
        if expression is not None:
            self._set_expression(desc, expression)
        desc.heads, desc.k, desc.next_n, desc.max_batch = heads, k, next_n, max_batch
        desc.max_blocks_per_seq, desc.max_total_keys = max_blocks_per_seq, max_total_keys
        desc.sorted, desc.key_splits = 1 if sorted else 0, key_splits
        self._arch = arch.encode() if arch else None
        desc.arch = self._arch
        self.desc = desc
        self.heads, self.k, self.next_n, self.max_batch = heads, k, next_n, max_batch
        self.max_blocks_per_seq = max_blocks_per_seq
        self._options = _capi.PagedCallOptions()
        _capi.lib.winnowPagedCallOptionsInit(ctypes.byref(self._options))
        self._create(context, _capi.lib.winnowPagedPlanCreate, desc, 7, build, workspace)

    def rows(self, q):
        """Output rows of a call with these queries: B * next_n."""
        return q.shape[0] * self.next_n

    def execute(self, q, cache, block_table, context_lens, weights=None, *, out, hint=None,
                stream=None):
        """winnowPagedTopkEx into the caller's out (int32 [B * next_n, k], rows contiguous; a
        strided view of an engine's larger buffer will do). q fp8 (float8_e4m3fn or its
        uint8 bytes) [B, next_n, heads, 128]; cache uint8 [num_blocks, 64, 1, 132];
        block_table int32 [B, >= max_blocks_per_seq]; context_lens int32 [B] or
        [B, next_n]; weights fp32 [B * next_n, heads]. hint: optional int32
        [B * next_n, k], the previous step's selection (its output; `out` itself will do):
        the stream path filters from its keys' k-th best instead of sampling; exact
        whatever it holds (winnowPagedCallOptions_t.hint)."""
        s = self._slots
        s.set(_Q, q, "q")
        s.set(_CACHE, cache, "cache", raw_bytes=True)
        s.set(_TABLE, block_table, "block_table")
        s.set(_LENS, context_lens, "context_lens")
        s.set(_WEIGHTS, weights, "weights")
        s.set(_OUT, out, "out_indices")
        options = None
        if hint is not None:
            s.set(_HINT, hint, "hint")
            self._options.hint = s.at(_HINT)
            options = ctypes.addressof(self._options)
        self._launch(self._topk_ex(options), s.at(_Q), s.at(_CACHE), s.at(_TABLE),
                     s.at(_LENS), s.at(_WEIGHTS) if weights is not None else None, s.at(_OUT),
                     stream=stream)

    @staticmethod
    def _topk_ex(options):
        """winnowPagedTopkEx with `options` last, in _launch's argument order."""
        def call(handle, *args):
            return _capi.lib.winnowPagedTopkEx(handle, *args, options)
        return call
