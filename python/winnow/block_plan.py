"""winnow.BlockPlan: one winnowBlockPlan_t (FlashPrefill block selection and block-sparse
attention) with a workspace for its longest sequence, allocated once at build."""
import ctypes

from . import _capi, _device
from ._plan_handle import PlanHandle
from .errors import check


def block_rule(alpha=None, sink_blocks=None, local_blocks=None, last_blocks=None,
               min_blocks=None):
    """A winnowBlockRule_t: the C defaults (winnowBlockRuleInit) where a field is None."""
    r = _capi.BlockRule()
    _capi.lib.winnowBlockRuleInit(ctypes.byref(r))
    for name, value in (("alpha", alpha), ("sink_blocks", sink_blocks),
                        ("local_blocks", local_blocks), ("last_blocks", last_blocks),
                        ("min_blocks", min_blocks)):
        if value is not None:
            setattr(r, name, value)
    return r


class BlockPlan(PlanHandle):
    """Mirrors winnowBlockDesc_t (the C defaults where a field is None): heads, kv_heads,
    head_dim, max_seq_len, arch. q [L, heads, d], k and v [L, kv_heads, d], bf16."""

    _kind = "BlockPlan"
    _destroy = staticmethod(lambda h: _capi.lib.winnowBlockPlanDestroy(h))

    def __init__(self, context, *, heads=None, kv_heads=None, head_dim=None, max_seq_len=None,
                 arch=None, workspace=None, build=True):
        self.context = context
        self._handle = None
        desc = _capi.BlockDesc()
        _capi.lib.winnowBlockDescInit(ctypes.byref(desc))
        for name, value in (("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim),
                            ("max_seq_len", max_seq_len)):
            if value is not None:
                setattr(desc, name, value)
        self._arch = arch.encode() if arch else None
        desc.arch = self._arch
        self.desc = desc
        self.heads, self.max_seq_len = desc.heads, desc.max_seq_len
        self._create(context, _capi.lib.winnowBlockPlanCreate, desc, 6, build, workspace)

    def build(self, workspace=None):
        """winnowBlockPlanBuild, then the workspace for max_seq_len: the caller's, or one
        allocated now (none without a GPU)."""
        check(_capi.lib.winnowBlockPlanBuild(self.handle))
        self.built = True
        self._use_workspace(workspace, lambda: self.workspace_size(self.max_seq_len))
        return self

    def workspace_size(self, seq_len):
        n = ctypes.c_size_t()
        check(_capi.lib.winnowBlockPlanGetWorkspaceSize(self.handle, seq_len, ctypes.byref(n)))
        return n.value

    def index_capacity(self, seq_len):
        """Entries the CSR index of a seq_len sequence may need (winnowBlockIndexCapacity)."""
        n = ctypes.c_int64()
        check(_capi.lib.winnowBlockIndexCapacity(self.handle, seq_len, ctypes.byref(n)))
        return n.value

    def select(self, q, k, rule=None, *, out_offsets, out_indices, stream=None):
        """winnowBlockSelect: offsets int32 [heads * L/128 + 1], indices int32 [capacity]."""
        s = self._slots
        s.set(0, q, "q")
        s.set(1, k, "k")
        s.set(2, out_offsets, "out_offsets")
        s.set(3, out_indices, "out_indices")
        rule = rule if rule is not None else block_rule()
        if stream is None:
            stream = _device.current_stream(self.context.device)
        check(_capi.lib.winnowBlockSelect(self.handle, s.at(0), s.at(1), ctypes.addressof(rule),
                                          s.at(2), s.at(3), self._workspace_ptr,
                                          self._workspace_bytes, stream))

    def attention(self, q, k, v, offsets, indices, *, out, stream=None):
        """winnowBlockAttention: causal attention over the selected blocks into out (bf16
        [L, heads, d])."""
        s = self._slots
        for i, (t, name) in enumerate(((q, "q"), (k, "k"), (v, "v"), (offsets, "offsets"),
                                       (indices, "indices"), (out, "out"))):
            s.set(i, t, name)
        if stream is None:
            stream = _device.current_stream(self.context.device)
        check(_capi.lib.winnowBlockAttention(self.handle, s.at(0), s.at(1), s.at(2), s.at(3),
                                             s.at(4), s.at(5), stream))
