"""winnow.TopkPlan: one winnowPlan_t (fused score + top-k, or materialize) with its
workspace. Compiling happens at build (in the constructor unless build=False), never in
execute; execute borrows torch tensors (no copies) and launches on the current torch stream.
A plan, with its workspace, serves one stream at a time."""
import ctypes

from . import _capi, _device, _fast_ops
from ._plan_handle import PlanHandle
from .errors import InvalidArgument, check

_OUT_INDICES, _OUT_SCORES = _capi.NUM_INPUTS, _capi.NUM_INPUTS + 1


def _code(table, value, field):
    try:
        return table[value]
    except KeyError:
        raise InvalidArgument(1, f"{field} = {value!r} is not one of {sorted(table)}") from None


class TopkPlan(PlanHandle):
    """Mirrors winnowProblemDesc_t; every field a keyword (the C defaults: relu_mh, 64 heads,
    d = 128, fp8 q and k with a key scale, k = 2048, dense window, unsorted, relative
    indices). score: "relu_mh", "ip", "l2", "cosine", or expression="..." for a text score.
    distance (l2, top-k mode): scores report ||q - k||^2 instead of its negation.
    workspace: a uint8 CUDA tensor of at least workspace_size bytes, 256-byte aligned; None
    allocates one at build (with a GPU)."""

    _kind = "TopkPlan"
    _destroy = staticmethod(lambda h: _capi.lib.winnowPlanDestroy(h))
    _build_plan = _capi.lib.winnowPlanBuild
    _get_workspace_size = _capi.lib.winnowPlanGetWorkspaceSize
    _get_counter_offset = _capi.lib.winnowPlanGetCounterOffset

    def __init__(self, context, *, score="relu_mh", expression=None, heads=64, head_dim=128,
                 q_dtype="fp8_e4m3", k_dtype="fp8_e4m3", key_scale=True, mode="topk", k=2048,
                 sorted=False, absolute_indices=False, distance=False, window="dense",
                 causal_ratio=1,
                 causal_offset=0, arch=None, candidate_capacity=0, sample_size=-1,
                 key_splits=0, max_workspace_bytes=0, workspace=None, build=True):
        self.context = context
        self._handle = None
        desc = _capi.ProblemDesc()
        _capi.lib.winnowProblemDescInit(ctypes.byref(desc))
        if expression is not None:
            self._set_expression(desc, expression)
        else:
            desc.score = _code(_capi.SCORES, score, "score")
        desc.heads, desc.head_dim = heads, head_dim
        desc.q_dtype = _code(_capi.DTYPES, q_dtype, "q_dtype")
        desc.k_dtype = _code(_capi.DTYPES, k_dtype, "k_dtype")
        desc.key_scale = 1 if key_scale else 0
        desc.mode = _code(_capi.MODES, mode, "mode")
        desc.k = k
        desc.output_flags = ((_capi.OUTPUT_SORTED if sorted else 0) |
                             (_capi.OUTPUT_ABSOLUTE_INDICES if absolute_indices else 0) |
                             (_capi.OUTPUT_DISTANCE if distance else 0))
        desc.window = _code(_capi.WINDOWS, window, "window")
        desc.causal_ratio, desc.causal_offset = causal_ratio, causal_offset
        self._arch = arch.encode() if arch else None
        desc.arch = self._arch
        desc.candidate_capacity, desc.sample_size = candidate_capacity, sample_size
        desc.key_splits, desc.max_workspace_bytes = key_splits, max_workspace_bytes
        self.desc = desc
        self.k, self.mode, self.window = k, mode, window
        self._fast_kind = (_fast_ops.KIND_TOPK if mode == "topk" else
                           _fast_ops.KIND_MATERIALIZE)
        self._options = _capi.CallOptions()
        _capi.lib.winnowCallOptionsInit(ctypes.byref(self._options))
        self._stream_options = _capi.StreamOptions()
        _capi.lib.winnowStreamOptionsInit(ctypes.byref(self._stream_options))
        self._create(context, _capi.lib.winnowPlanCreate, desc, _capi.NUM_INPUTS + 2, build,
                     workspace)

    # ---- lifecycle ----

    @property
    def source(self):
        """The generated CUDA source."""
        text = ctypes.c_char_p()
        check(_capi.lib.winnowPlanGetSource(self.handle, ctypes.byref(text)))
        return text.value.decode()

    def set_workspace(self, workspace=None):
        """Uses the caller's uint8 device tensor, or allocates one (workspace_size bytes)."""
        self._use_workspace(workspace, lambda: self.workspace_size)

    def finish_build(self):
        """Confirms that the plan is built (winnowPlanFinishBuild): a build is whole when
        it returns, so this only raises NotBuilt for a plan not built yet."""
        check(_capi.lib.winnowPlanFinishBuild(self.handle))

    # ---- calls ----
    def _fill(self, q, k, weights, key_scale, window_start, window_end, sample_hint,
              key_norms, out, out_scores):
        s = self._slots
        s.set(0, q, "q")
        s.set(1, k, "k")
        s.set(2, weights, "weights")
        s.set(3, key_scale, "key_scale")
        s.set(4, window_start, "window_start")
        s.set(5, window_end, "window_end")
        s.set(6, sample_hint, "sample_hint")
        s.set(7, key_norms, "key_norms")
        s.set(_OUT_INDICES, out, "out_indices")
        s.set(_OUT_SCORES, out_scores, "out_scores")
        return (s.address, _capi.NUM_INPUTS, s.at(_OUT_INDICES) if out is not None else None,
                s.at(_OUT_SCORES) if out_scores is not None else None)

    def execute(self, q, k, weights=None, key_scale=None, window_start=None, window_end=None,
                sample_hint=None, *, key_norms=None, out, out_scores=None, causal_offset=None,
                accumulate_counters=False, stream=None):
        """winnowExecuteEx into the caller's out (int32 [rows, k]) and out_scores (fp32
        [rows, k], or [rows, num_keys] in materialize mode); rows may be a strided view (for
        instance the first T rows of an engine's [max_tokens, 2048] buffer).
        key_norms: optional fp32 [num_keys], each key's |k|^2 as the caller stores it, for
        scores that read ksq (l2, cosine, an expression with ksq): the kernel reads it
        instead of summing the squares of every key, and uses the values as given. Refused
        for the other scores."""
        args = self._fill(q, k, weights, key_scale, window_start, window_end, sample_hint,
                          key_norms, out, out_scores)
        options = None
        if causal_offset is not None or accumulate_counters:
            o = self._options
            o.causal_offset = -1 if causal_offset is None else causal_offset
            o.accumulate_counters = 1 if accumulate_counters else 0
            options = ctypes.addressof(o)
        if stream is None:
            stream = _device.current_stream(self.context.device)
        check(_capi.lib.winnowExecuteEx(self.handle, *args, self._workspace_ptr,
                                        self._workspace_bytes, stream, options))

    def execute_stream(self, q, k, weights=None, key_scale=None, sample_hint=None, *,
                       key_norms=None, out, out_scores=None, chunk_rows=0,
                       chunk_sample_hint=True, stream=None):
        """winnowExecuteStream: a causal prefill's whole sequence in chunks of chunk_rows
        rows (0: chosen), one launch each on this plan's workspace, each chunk's sample hint
        the previous chunk's selection (chunk_sample_hint); equals one execute bit for bit.
        sample_hint: the first chunk's, if any. key_norms: as in execute (all the keys')."""
        args = self._fill(q, k, weights, key_scale, None, None, sample_hint, key_norms, out,
                          out_scores)
        o = self._stream_options
        o.chunk_rows = chunk_rows
        o.sample_hint = 1 if chunk_sample_hint else 0
        if stream is None:
            stream = _device.current_stream(self.context.device)
        check(_capi.lib.winnowExecuteStream(self.handle, *args, self._workspace_ptr,
                                            self._workspace_bytes, stream, ctypes.addressof(o)))
