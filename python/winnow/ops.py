"""The torch ops of the `winnow` namespace, over built plans, with fake (meta)
implementations for torch.compile:

  torch.ops.winnow.indexer_topk(plan, q, k, weights, key_scale, window_start, window_end,
                                sample_hint) -> int32 [rows, k]
  torch.ops.winnow.indexer_topk_out(..., out) -> ()       (into the caller's buffer)
  torch.ops.winnow.knn(plan, q, k, key_norms) -> (int32 [rows, k], fp32 [rows, k])
  torch.ops.winnow.stream_topk(plan, q, k, weights, key_scale, chunk_rows, sample_hint)
  torch.ops.winnow.block_select(plan, q, k, alpha, sink_blocks, local_blocks, last_blocks,
                                min_blocks) -> (int32 offsets, int32 indices)
  torch.ops.winnow.block_attention(plan, q, k, v, offsets, indices) -> bf16 [L, heads, d]
  torch.ops.winnow.paged_indexer_topk(plan, q, cache, block_table, context_lens, weights, hint)
                                -> int32 [B * next_n, k]      (decode, the paged key cache)
  torch.ops.winnow.paged_indexer_topk_out(..., out) -> ()  (into the caller's buffer)

`plan` is a built plan's id (TopkPlan.id, BlockPlan.id, PagedPlan.id). The ops compile nothing: a plan is
built before the first call, so a call can be traced, compiled and captured in a CUDA graph.
They are defined with torch.library.Library (not custom_op, whose Python dispatch costs
more per call) and registered for CUDA and CPU (CPU tensors reach the C checks, which
refuse them with the C message). When the torch extension libwinnow_torch.so is found
(_fast_ops: $WINNOW_TORCH_EXT, or beside libwinnow.so.0), its C++ kernels implement
indexer_topk, indexer_topk_out and knn for CUDA and CPU instead of the Python ones below
(winnow.fast_ops_loaded() says which); the schemas and fake implementations stay these.
Called through torch.ops, the C++ kernels raise RuntimeError carrying the C message; the
functions at the end of this module raise the Python path's exceptions on both paths."""
import torch

from . import _fast_ops, _registry
from .block_plan import BlockPlan, block_rule
from .paged_plan import PagedPlan
from .plan import TopkPlan

_lib = torch.library.Library("winnow", "DEF")
_TOPK_INPUTS = ("Tensor q, Tensor k, Tensor? weights=None, Tensor? key_scale=None, "
                "Tensor? window_start=None, Tensor? window_end=None, Tensor? sample_hint=None")
_PAGED_INPUTS = ("Tensor q, Tensor cache, Tensor block_table, Tensor context_lens, "
                 "Tensor? weights=None, Tensor? hint=None")
_SCHEMAS = {
    "indexer_topk": f"indexer_topk(int plan, {_TOPK_INPUTS}) -> Tensor",
    "indexer_topk_out": f"indexer_topk_out(int plan, {_TOPK_INPUTS}, *, Tensor(a!) out) -> ()",
    "knn": "knn(int plan, Tensor q, Tensor k, Tensor? key_norms=None) -> (Tensor, Tensor)",
    "stream_topk": "stream_topk(int plan, Tensor q, Tensor k, Tensor? weights=None, "
                   "Tensor? key_scale=None, int chunk_rows=0, bool sample_hint=True) -> Tensor",
    "block_select": "block_select(int plan, Tensor q, Tensor k, float? alpha=None, "
                    "int? sink_blocks=None, int? local_blocks=None, int? last_blocks=None, "
                    "int? min_blocks=None) -> (Tensor, Tensor)",
    "block_attention": "block_attention(int plan, Tensor q, Tensor k, Tensor v, Tensor offsets, "
                       "Tensor indices) -> Tensor",
    "paged_indexer_topk": f"paged_indexer_topk(int plan, {_PAGED_INPUTS}) -> Tensor",
    "paged_indexer_topk_out": f"paged_indexer_topk_out(int plan, {_PAGED_INPUTS}, *, "
                              "Tensor(a!) out) -> ()",
}


def _topk_plan(plan_id):
    plan = _registry.get(plan_id, TopkPlan)
    if plan.mode != "topk":
        raise ValueError(f"winnow: plan {plan_id} is a {plan.mode} plan; the ops take top-k "
                         "plans (TopkPlan.execute writes materialized scores)")
    return plan


def _indices_like(plan, q):
    return q.new_empty((q.shape[0], plan.k), dtype=torch.int32)


def _paged_indices_like(plan, q):
    return q.new_empty((plan.rows(q), plan.k), dtype=torch.int32)


def _check_out(out, rows, k, shape_name):
    """The traced call's check of an _out variant's buffer (the C library checks it at run
    time)."""
    if out.dim() != 2 or out.shape[0] != rows or out.shape[1] != k:
        raise ValueError(f"out_indices: shape {tuple(out.shape)}, expected {shape_name} = "
                         f"[{rows}, {k}]")


def _block_outputs(plan, q):
    L = q.shape[0]
    offsets = q.new_empty((plan.heads * (L // 128) + 1,), dtype=torch.int32)
    return offsets, q.new_empty((plan.index_capacity(L),), dtype=torch.int32)


# ---- real implementations ----
def _indexer_topk(plan, q, k, weights=None, key_scale=None, window_start=None,
                  window_end=None, sample_hint=None):
    p = _topk_plan(plan)
    out = _indices_like(p, q)
    p.execute(q, k, weights, key_scale, window_start, window_end, sample_hint, out=out)
    return out


def _indexer_topk_out(plan, q, k, weights=None, key_scale=None, window_start=None,
                      window_end=None, sample_hint=None, *, out):
    _topk_plan(plan).execute(q, k, weights, key_scale, window_start, window_end, sample_hint,
                             out=out)


def _knn(plan, q, k, key_norms=None):
    p = _topk_plan(plan)
    out = _indices_like(p, q)
    scores = q.new_empty((q.shape[0], p.k), dtype=torch.float32)
    p.execute(q, k, key_norms=key_norms, out=out, out_scores=scores)
    return out, scores


def _stream_topk(plan, q, k, weights=None, key_scale=None, chunk_rows=0, sample_hint=True):
    p = _topk_plan(plan)
    out = _indices_like(p, q)
    p.execute_stream(q, k, weights, key_scale, out=out, chunk_rows=chunk_rows,
                     chunk_sample_hint=sample_hint)
    return out


def _paged_indexer_topk(plan, q, cache, block_table, context_lens, weights=None, hint=None):
    p = _registry.get(plan, PagedPlan)
    out = _paged_indices_like(p, q)
    p.execute(q, cache, block_table, context_lens, weights, out=out, hint=hint)
    return out


def _paged_indexer_topk_out(plan, q, cache, block_table, context_lens, weights=None, hint=None,
                            *, out):
    _registry.get(plan, PagedPlan).execute(q, cache, block_table, context_lens, weights,
                                           out=out, hint=hint)


def _block_select(plan, q, k, alpha=None, sink_blocks=None, local_blocks=None,
                  last_blocks=None, min_blocks=None):
    p = _registry.get(plan, BlockPlan)
    offsets, indices = _block_outputs(p, q)
    p.select(q, k, block_rule(alpha, sink_blocks, local_blocks, last_blocks, min_blocks),
             out_offsets=offsets, out_indices=indices)
    return offsets, indices


def _block_attention(plan, q, k, v, offsets, indices):
    out = torch.empty_like(q)
    _registry.get(plan, BlockPlan).attention(q, k, v, offsets, indices, out=out)
    return out


# ---- fake implementations: shapes only, from the plan ----
def _indexer_topk_fake(plan, q, k, weights=None, key_scale=None, window_start=None,
                       window_end=None, sample_hint=None):
    return _indices_like(_topk_plan(plan), q)


def _indexer_topk_out_fake(plan, q, k, weights=None, key_scale=None, window_start=None,
                           window_end=None, sample_hint=None, *, out):
    _check_out(out, q.shape[0], _topk_plan(plan).k, "[rows, k]")


def _knn_fake(plan, q, k, key_norms=None):
    p = _topk_plan(plan)
    return _indices_like(p, q), q.new_empty((q.shape[0], p.k), dtype=torch.float32)


def _stream_topk_fake(plan, q, k, weights=None, key_scale=None, chunk_rows=0,
                      sample_hint=True):
    return _indices_like(_topk_plan(plan), q)


def _block_select_fake(plan, q, k, alpha=None, sink_blocks=None, local_blocks=None,
                       last_blocks=None, min_blocks=None):
    return _block_outputs(_registry.get(plan, BlockPlan), q)


def _block_attention_fake(plan, q, k, v, offsets, indices):
    _registry.get(plan, BlockPlan)
    return torch.empty_like(q)


def _paged_indexer_topk_fake(plan, q, cache, block_table, context_lens, weights=None,
                             hint=None):
    return _paged_indices_like(_registry.get(plan, PagedPlan), q)


def _paged_indexer_topk_out_fake(plan, q, cache, block_table, context_lens, weights=None,
                                 hint=None, *, out):
    p = _registry.get(plan, PagedPlan)
    _check_out(out, p.rows(q), p.k, "[B * next_n, k]")


_IMPLS = {
    "indexer_topk": (_indexer_topk, _indexer_topk_fake),
    "indexer_topk_out": (_indexer_topk_out, _indexer_topk_out_fake),
    "knn": (_knn, _knn_fake),
    "stream_topk": (_stream_topk, _stream_topk_fake),
    "block_select": (_block_select, _block_select_fake),
    "block_attention": (_block_attention, _block_attention_fake),
    "paged_indexer_topk": (_paged_indexer_topk, _paged_indexer_topk_fake),
    "paged_indexer_topk_out": (_paged_indexer_topk_out, _paged_indexer_topk_out_fake),
}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_schema)
_fast_ops.load()
for _name in _SCHEMAS:
    _real, _fake = _IMPLS[_name]
    if not _fast_ops.provides(_name):
        _lib.impl(_name, _real, "CUDA")
        _lib.impl(_name, _real, "CPU")
    torch.library.register_fake(f"winnow::{_name}", _fake, lib=_lib)

_indexer_topk_op = torch.ops.winnow.indexer_topk.default
_indexer_topk_out_op = torch.ops.winnow.indexer_topk_out.default
_knn_op = torch.ops.winnow.knn.default
_paged_op = torch.ops.winnow.paged_indexer_topk.default
_paged_out_op = torch.ops.winnow.paged_indexer_topk_out.default


def _raise_as_python_path(error):
    """Re-raises a C++ kernel's RuntimeError as the Python path's exception."""
    mapped = _fast_ops.python_error(error)
    if mapped is None:
        raise error
    raise mapped from None


# ---- Python entry points taking plan objects ----
def indexer_topk(plan, q, k, weights=None, key_scale=None, window_start=None, window_end=None,
                 sample_hint=None, out=None):
    """Top-k indices int32 [rows, k] (into `out` when given) of a built TopkPlan."""
    try:
        if out is None:
            return _indexer_topk_op(plan.id, q, k, weights, key_scale, window_start,
                                    window_end, sample_hint)
        _indexer_topk_out_op(plan.id, q, k, weights, key_scale, window_start, window_end,
                             sample_hint, out=out)
    except RuntimeError as e:
        _raise_as_python_path(e)
    return out


def knn(plan, q, k, key_norms=None):
    """(indices int32 [rows, k], scores fp32 [rows, k]) of an ip / l2 / cosine TopkPlan.
    key_norms (l2, cosine): optional fp32 [num_keys], each key's |k|^2 as kept beside the
    keys, read instead of summed on every call; the scores are those of the norms given.
    Refused for ip (its score reads no ksq)."""
    try:
        return _knn_op(plan.id, q, k, key_norms)
    except RuntimeError as e:
        _raise_as_python_path(e)


def stream_topk(plan, q, k, weights=None, key_scale=None, chunk_rows=0, sample_hint=True):
    """A causal TopkPlan over a whole sequence in chunks (winnowExecuteStream)."""
    return torch.ops.winnow.stream_topk(plan.id, q, k, weights, key_scale, chunk_rows,
                                        sample_hint)


def block_select(plan, q, k, alpha=None, sink_blocks=None, local_blocks=None, last_blocks=None,
                 min_blocks=None):
    """(offsets, indices) of the CSR block index of a BlockPlan (None: the C default)."""
    return torch.ops.winnow.block_select(plan.id, q, k, alpha, sink_blocks, local_blocks,
                                         last_blocks, min_blocks)


def block_attention(plan, q, k, v, offsets, indices):
    """Causal attention over the selected blocks: bf16 [L, heads, d]."""
    return torch.ops.winnow.block_attention(plan.id, q, k, v, offsets, indices)


def paged_indexer_topk(plan, q, cache, block_table, context_lens, weights=None, out=None,
                       hint=None):
    """Decode: int32 [B * next_n, k] token positions (into `out` when given), -1 padded, of
    a built PagedPlan over the paged fp8 key cache (PagedPlan.execute gives the formats).
    hint: optional int32 [B * next_n, k], the previous step's selection (`out` itself will
    do): the filter starts from its keys' k-th best; exact whatever it holds."""
    try:
        if out is None:
            return _paged_op(plan.id, q, cache, block_table, context_lens, weights, hint)
        _paged_out_op(plan.id, q, cache, block_table, context_lens, weights, hint, out=out)
    except RuntimeError as e:
        _raise_as_python_path(e)
    return out
