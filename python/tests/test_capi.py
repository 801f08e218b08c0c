"""The ctypes layer over the C ABI, without torch: struct layouts against the C library,
errors as exceptions carrying the C message, the plan and context lifecycle."""
import ctypes

import pytest

import winnow
from winnow import _capi
from winnow._tensors import TensorSlots


def test_version_is_the_headers():
    assert winnow.version() == (0, 1, 0)
    assert winnow.__version__ == "0.1.0"


@pytest.mark.parametrize("struct, init", [
    (_capi.ProblemDesc, "winnowProblemDescInit"), (_capi.CallOptions, "winnowCallOptionsInit"),
    (_capi.StreamOptions, "winnowStreamOptionsInit"), (_capi.BlockDesc, "winnowBlockDescInit"),
    (_capi.PagedDesc, "winnowPagedDescInit"),
])
def test_struct_sizes_are_the_c_librarys(struct, init):
    s = struct()
    getattr(_capi.lib, init)(ctypes.byref(s))
    assert s.struct_size == ctypes.sizeof(struct)  # Init writes sizeof() as C sees it


def test_problem_desc_defaults_read_back_field_by_field():
    d = _capi.ProblemDesc()
    _capi.lib.winnowProblemDescInit(ctypes.byref(d))
    assert (d.version, d.score, d.heads, d.head_dim, d.q_dtype, d.k_dtype) == (1, 0, 64, 128, 4, 4)
    assert (d.key_scale, d.mode, d.k, d.output_flags, d.window) == (1, 0, 2048, 0, 0)
    assert (d.causal_ratio, d.causal_offset, d.arch) == (1, 0, None)
    assert (d.candidate_capacity, d.sample_size, d.key_splits, d.max_workspace_bytes) == (0, -1, 0, 0)


def test_paged_desc_defaults_read_back():
    d = _capi.PagedDesc()
    _capi.lib.winnowPagedDescInit(ctypes.byref(d))
    assert (d.version, d.score, d.expression, d.heads, d.k, d.next_n, d.max_batch) == \
        (1, 0, None, 64, 2048, 1, 1)
    assert (d.max_blocks_per_seq, d.max_total_keys, d.sorted, d.key_splits, d.arch) == \
        (0, 0, 0, 0, None)


def test_other_defaults_read_back():
    o = _capi.StreamOptions()
    _capi.lib.winnowStreamOptionsInit(ctypes.byref(o))
    assert (o.chunk_rows, o.sample_hint) == (0, 1)
    c = _capi.CallOptions()
    _capi.lib.winnowCallOptionsInit(ctypes.byref(c))
    assert (c.causal_offset, c.accumulate_counters) == (-1, 0)
    r = winnow.block_rule()
    assert (round(r.alpha, 6), r.sink_blocks, r.local_blocks, r.last_blocks, r.min_blocks) == \
        (0.1, 1, 2, 0, 4)
    assert winnow.block_rule(alpha=0.5, min_blocks=2).min_blocks == 2


def test_plan_create_errors_carry_the_c_message(ctx):
    with pytest.raises(winnow.InvalidArgument, match="k = 9000 exceeds the maximum 8192") as e:
        ctx.topk_plan(arch="sm_90a", k=9000, build=False)
    assert e.value.status == 1 and e.value.status_name == "WINNOW_STATUS_INVALID_ARGUMENT"
    with pytest.raises(winnow.NotSupported, match="sm_80"):
        ctx.topk_plan(arch="sm_80", build=False)
    with pytest.raises(winnow.InvalidArgument, match="position"):
        ctx.topk_plan(arch="sm_90a", expression="sum_h(w[h] * relu(dot(h)) +", build=False)
    with pytest.raises(winnow.InvalidArgument, match="heads = 0"):
        ctx.topk_plan(arch="sm_90a", heads=0, build=False)
    with pytest.raises(winnow.InvalidArgument, match="window"):
        ctx.topk_plan(arch="sm_90a", window="sliding", build=False)


def test_distance_output_is_for_l2_top_k(ctx):
    small = dict(heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16", key_scale=False, k=16,
                 arch="sm_90a", build=False)
    with pytest.raises(winnow.InvalidArgument, match="not WINNOW_SCORE_L2"):
        ctx.topk_plan(score="ip", distance=True, **small)
    with pytest.raises(winnow.InvalidArgument, match="materialize mode"):
        ctx.topk_plan(score="l2", distance=True, mode="materialize", **small)
    plan = ctx.topk_plan(score="l2", distance=True, **small)
    assert plan.desc.output_flags == winnow._capi.OUTPUT_DISTANCE


def test_block_plan_errors_carry_the_c_message(ctx):
    with pytest.raises(winnow.InvalidArgument, match="kv_heads"):
        ctx.block_plan(arch="sm_90a", heads=32, kv_heads=5, build=False)
    p = ctx.block_plan(arch="sm_90a", max_seq_len=4096, build=False)
    assert p.index_capacity(1024) == 32 * 8 * 9 // 2
    with pytest.raises(winnow.NotSupported, match="multiple of the block size"):
        p.index_capacity(1000)
    with pytest.raises(winnow.InvalidArgument, match="exceeds the problem's max_seq_len"):
        p.index_capacity(8192)
    p.close()


def test_execute_of_an_unbuilt_plan_is_refused_by_c(ctx):
    p = ctx.topk_plan(arch="sm_90a", heads=1, head_dim=64, score="ip", q_dtype="fp32",
                      k_dtype="fp32", key_scale=False, k=4, build=False)
    with pytest.raises(winnow.InvalidArgument, match="q missing"):
        p.execute(None, None, out=None)
    p.close()


def test_tensor_slots_match_winnowTensor_t():
    slots = TensorSlots(2)
    slots.set_raw(1, 0x1000, _capi.DTYPE_INT32, (3, 5), (7, 1), 2)
    t = _capi.Tensor.from_address(slots.at(1))
    assert (t.data, t.dtype, t.ndim, list(t.shape), list(t.strides), t.device) == \
        (0x1000, 5, 2, [3, 5, 0, 0], [7, 1, 0, 0], 2)
    slots.clear(1)
    assert _capi.Tensor.from_address(slots.at(1)).ndim == 0


def test_closing_a_context_with_an_open_plan_is_refused():
    c = winnow.Context(0)
    p = c.topk_plan(arch="sm_90a", build=False)
    with pytest.raises(ValueError, match="close its plans first"):
        c.close()
    p.close()
    assert p.closed
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.handle


def test_finish_build_before_build_raises_not_built(ctx):
    p = ctx.topk_plan(arch="sm_90a", build=False)
    with pytest.raises(winnow.NotBuilt, match="not built"):
        p.finish_build()
    p.close()
