"""The sharded top-k C API through ctypes, without torch or a GPU (issue 19): the merge
descriptor's layout and defaults, argument errors as exceptions with the C message, the
shard of a top-k plan."""
import ctypes

import pytest

import winnow
from winnow import _capi
from winnow.errors import InvalidArgument, NotSupported, check


def _merge_desc(**fields):
    d = _capi.MergeDesc()
    _capi.lib.winnowMergeDescInit(ctypes.byref(d))
    d.arch = b"sm_90a"
    for name, value in fields.items():
        setattr(d, name, value)
    return d


def test_merge_desc_layout_and_defaults_are_the_c_librarys():
    d = _capi.MergeDesc()
    _capi.lib.winnowMergeDescInit(ctypes.byref(d))
    assert d.struct_size == ctypes.sizeof(_capi.MergeDesc)
    assert (d.version, d.ranks, d.k, d.max_rows, d.sorted, d.arch) == (1, 2, 2048, 0, 0, None)


@pytest.mark.parametrize("fields, text", [
    (dict(max_rows=0), "max_rows = 0"), (dict(max_rows=8, ranks=0), "ranks = 0"),
    (dict(max_rows=8, k=9000), "k = 9000"),
])
def test_bad_merge_descriptors_raise_with_the_c_message(fields, text):
    ctx = winnow.Context(0)
    handle = ctypes.c_void_p()
    d = _merge_desc(**fields)
    with pytest.raises(InvalidArgument, match=text):
        check(_capi.lib.winnowMergePlanCreate(ctx.handle, ctypes.byref(d), ctypes.byref(handle)))
    assert not handle.value


def test_merge_plan_sizes_and_nccl_missing(monkeypatch):
    ctx = winnow.Context(0)
    handle = ctypes.c_void_p()
    d = _merge_desc(ranks=3, k=16, max_rows=10)
    check(_capi.lib.winnowMergePlanCreate(ctx.handle, ctypes.byref(d), ctypes.byref(handle)))
    try:
        n = ctypes.c_size_t()
        check(_capi.lib.winnowMergePlanGetWorkspaceSize(handle, ctypes.byref(n)))
        assert n.value == 256 + 10 * 16 * 8 * 4
        with pytest.raises(InvalidArgument, match="nccl_comm is null"):
            check(_capi.lib.winnowShardMergeNccl(handle, None, None, None, None, None, None, 0,
                                                 None))
        monkeypatch.setenv("WINNOW_NCCL_LIBRARY", "/nonexistent/winnow-py/libnccl.so.2")
        comm = ctypes.c_int(0)  # never touched: the library is not there
        with pytest.raises(NotSupported, match="NCCL is not available"):
            check(_capi.lib.winnowShardMergeNccl(handle, None, None, ctypes.byref(comm), None,
                                                 None, None, 0, None))
    finally:
        check(_capi.lib.winnowMergePlanDestroy(handle))


def test_set_shard_on_a_top_k_plan():
    ctx = winnow.Context(0)
    plan = winnow.TopkPlan(ctx, score="ip", heads=1, head_dim=128, q_dtype="fp16",
                           k_dtype="fp16", key_scale=False, k=8, arch="sm_90a", build=False)
    with pytest.raises(InvalidArgument, match="shard_key_offset = 10"):
        check(_capi.lib.winnowPlanSetShard(plan.handle, 10, 10))
    check(_capi.lib.winnowPlanSetShard(plan.handle, 5, 10))
