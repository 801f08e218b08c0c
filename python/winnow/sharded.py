"""winnow.ShardedTopk: exact top-k over keys sharded across the ranks of a torch.distributed
process group. Rank r holds the global keys [key_offset, key_offset + shard_keys)
of total_keys; each call runs this rank's fused top-k (a TopkPlan told its shard), packs its
indices and scores into one int32 [rows, 2k] buffer, all-gathers it with
torch.distributed.all_gather_into_tensor on the group (NCCL) and merges the R lists per row on
the GPU (MergePlan.merge_gathered, winnowShardMerge's loopback form). Every rank gets the same
result, equal to one TopkPlan over all keys bit for bit: NaN first, ties to the smaller global
index, -1 padding, the kernels' own scores."""
import torch
import torch.distributed as dist

from . import _device
from ._capi import lib
from .errors import InvalidArgument, check
from .merge_plan import MergePlan
from .plan import TopkPlan


def require_nccl_group(group):
    """The group's (rank, size); refuses a process that has no process group, or a group whose
    backend is not NCCL (the lists are CUDA tensors)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("winnow.ShardedTopk: torch.distributed has no process group; call "
                           "torch.distributed.init_process_group('nccl') first (torchrun sets "
                           "the rank and world size)")
    backend = str(dist.get_backend(group))
    if "nccl" not in backend:
        raise InvalidArgument(1, f"winnow.ShardedTopk: the process group's backend is "
                                 f"{backend!r}; the all-gather of CUDA lists needs 'nccl'")
    return dist.get_rank(group), dist.get_world_size(group)


def check_shards(shards, total_keys):
    """shards: every rank's (key_offset, shard_keys), in rank order. They must be disjoint and
    cover [0, total_keys) exactly (any order across ranks), or the merge is not over all
    keys."""
    at = 0
    for offset, count in sorted(shards):
        if offset != at:
            what = "overlap" if offset < at else "leave a gap"
            raise InvalidArgument(1, f"winnow.ShardedTopk: the ranks' shards {list(shards)} "
                                     f"{what} at key {min(at, offset)}: they must cover "
                                     f"[0, {total_keys}) once")
        at = offset + count
    if at != total_keys:
        raise InvalidArgument(1, f"winnow.ShardedTopk: the ranks' shards {list(shards)} end at "
                                 f"key {at}, total_keys is {total_keys}")


def candidate_views(lists, k):
    """(indices int32, scores fp32) views of lists int32 [..., 2k]: columns [0, k) are the
    indices, [k, 2k) the scores' bits."""
    return lists[..., :k], lists[..., k:].view(torch.float32)


def gather_candidates(local, gathered, ranks, group=None):
    """All-gathers this rank's int32 [rows, 2k] candidates into the front of `gathered` (a flat
    int32 buffer of at least ranks * rows * 2k) and returns it as [ranks, rows, 2k], rank order.
    Enqueued on the current stream (torch's collective; no host wait from winnow)."""
    rows, width = local.shape
    out = gathered[:ranks * rows * width].view(ranks * rows, width)
    dist.all_gather_into_tensor(out, local, group=group)
    return out.view(ranks, rows, width)


class ShardedTopk:
    """One rank's part of a sharded top-k: this rank's TopkPlan (every TopkPlan field a keyword
    in **plan_fields: score, heads, head_dim, dtypes, k, window, sorted, absolute_indices, ...),
    told its shard, and a MergePlan of the group's size, both built here (compiled once).

    key_offset, shard_keys: this rank's keys [key_offset, key_offset + shard_keys) of
    total_keys; window arrays and causal positions are global, and so are the indices returned.
    max_rows: rows per call at most (sizes the buffers and the merge workspace). group: the
    process group (None: the default), whose backend must be NCCL (torch.cuda.set_device to
    the context's device first, as NCCL groups ask).

    Construction is collective: every rank of the group constructs one, and their shards are
    exchanged once (all_gather_object) and checked to cover [0, total_keys) once, with the same
    k, total_keys and max_rows. Calls are collective too: every rank calls with the same number
    of rows (not checked per call: that would need a host synchronisation).

    Per call: no host synchronisation and no allocation by winnow (the candidate and gathered
    buffers are allocated here, once); out / out_scores None allocate the result. The
    all-gather is torch's (all_gather_into_tensor on the group's NCCL communicator): what it
    does per call (its own stream, events, any allocation) is torch's, and CUDA graph capture
    of a call depends on it; not tested in a graph, not run on a GPU here."""

    def __init__(self, context, *, key_offset, shard_keys, total_keys, max_rows, group=None,
                 **plan_fields):
        k = plan_fields.get("k", 2048)
        if not 1 <= k <= 8192:
            raise InvalidArgument(1, f"winnow.ShardedTopk: k = {k} is outside 1..8192")
        if max_rows < 1:
            raise InvalidArgument(1, f"winnow.ShardedTopk: max_rows = {max_rows}, at least 1")
        self.rank, self.ranks = require_nccl_group(group)
        self.group, self.context = group, context
        mine = (int(key_offset), int(shard_keys), int(total_keys), int(k), int(max_rows))
        everyone = [None] * self.ranks
        dist.all_gather_object(everyone, mine, group=group)
        for r, theirs in enumerate(everyone):
            if theirs[2:] != mine[2:]:
                raise InvalidArgument(1, f"winnow.ShardedTopk: rank {r} has (total_keys, k, "
                                         f"max_rows) = {theirs[2:]}, this rank {mine[2:]}")
        check_shards([(o, n) for o, n, *_ in everyone], total_keys)
        self.key_offset, self.shard_keys, self.total_keys = mine[:3]
        self.k, self.max_rows = k, max_rows
        self.plan = TopkPlan(context, build=False, **plan_fields)
        if self.plan.mode != "topk":
            raise InvalidArgument(1, "winnow.ShardedTopk: the plan's mode must be 'topk'")
        check(lib.winnowPlanSetShard(self.plan.handle, self.key_offset, self.total_keys))
        self.plan.build(plan_fields.get("workspace"))
        self.merger = MergePlan(context, ranks=self.ranks, max_rows=max_rows, k=k,
                                sorted=plan_fields.get("sorted", False),
                                arch=plan_fields.get("arch"))
        self._local = self._gathered = None
        if _device.gpu_available():
            device = torch.device("cuda", context.device)
            self._local = torch.empty((max_rows, 2 * k), dtype=torch.int32, device=device)
            self._gathered = torch.empty(self.ranks * max_rows * 2 * k, dtype=torch.int32,
                                         device=device)

    def __call__(self, q, keys, weights=None, key_scale=None, window_start=None,
                 window_end=None, *, key_norms=None, out=None, out_scores=None):
        """(indices int32 [rows, k], scores fp32 [rows, k]) over all ranks' keys, on every
        rank. keys: this rank's shard_keys rows of K; key_norms (l2, cosine): optional fp32
        [shard_keys], this rank's keys' |k|^2; the rest as TopkPlan.execute. out /
        out_scores: the caller's buffers (None: allocated)."""
        rows = q.shape[0]
        if rows > self.max_rows:
            raise InvalidArgument(1, f"winnow.ShardedTopk: q has {rows} rows, max_rows is "
                                     f"{self.max_rows}")
        if keys.shape[0] != self.shard_keys:
            raise InvalidArgument(1, f"winnow.ShardedTopk: keys has {keys.shape[0]} rows, this "
                                     f"rank's shard_keys is {self.shard_keys}")
        if self._local is None:
            raise InvalidArgument(1, "winnow.ShardedTopk: no GPU in this process; a call "
                                     "needs one")
        local = self._local[:rows]
        indices, scores = candidate_views(local, self.k)
        self.plan.execute(q, keys, weights, key_scale, window_start, window_end,
                          key_norms=key_norms, out=indices, out_scores=scores)
        lists = gather_candidates(local, self._gathered, self.ranks, self.group)
        if out is None:
            out = local.new_empty((rows, self.k))
        if out_scores is None:
            out_scores = local.new_empty((rows, self.k), dtype=torch.float32)
        all_indices, all_scores = candidate_views(lists, self.k)
        self.merger.merge_gathered(all_indices, all_scores, out=out, out_scores=out_scores)
        return out, out_scores

    def close(self):
        self.merger.close()
        self.plan.close()
