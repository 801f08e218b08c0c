"""The sharded top-k over torch.distributed without a GPU (issue 19): the reference merge of
per-shard lists equals the unsharded top-k (ties across shards, NaN, -1 padding), the
candidate buffers' layout through all_gather_into_tensor on gloo (world size 1, and 2 by
spawn), ShardedTopk's and MergePlan's argument errors."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import winnow  # noqa: E402
from winnow import sharded  # noqa: E402
from winnow.errors import InvalidArgument  # noqa: E402
from winnow.testing import reference, shard_reference  # noqa: E402


def tied_scores(rows, n, seed, nan=True):
    """Small-integer fp32 scores (many ties, some across any shard boundary), a few NaN."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(-3, 4, (rows, n), generator=g).to(torch.float32)
    if nan:
        s[0, n // 3] = s[0, 2 * n // 3] = float("nan")
        s[1 % rows, n - 1] = float("nan")
    return s


@pytest.mark.parametrize("shards, k, sorted", [
    ([(0, 40), (40, 24)], 16, False), ([(0, 40), (40, 24)], 16, True),
    ([(0, 10), (10, 30), (40, 24)], 64, True),   # k = total: every key
    ([(0, 5), (5, 7)], 20, False),               # k > total: -1 padding
    ([(30, 34), (0, 30)], 8, True),              # shards in any rank order
])
def test_reference_merge_of_shard_lists_is_the_unsharded_top_k(shards, k, sorted):
    total = sum(n for _, n in shards)
    scores = tied_scores(6, total, seed=total + k)
    indices, values = shard_reference.shard_lists(scores, k, shards, sorted=sorted)
    got, got_scores = shard_reference.merge_lists(indices, values, k, sorted=sorted)
    want = reference.topk_rows(scores.to(torch.float64), k, relative=False, sorted=sorted)
    assert torch.equal(got, want)
    present = want >= 0
    picked = scores.gather(1, want.clamp(min=0).long())
    assert torch.equal(got_scores[present].isnan(), picked[present].isnan())
    assert torch.equal(got_scores[present].nan_to_num(), picked[present].nan_to_num())


def test_reference_merge_can_fail_on_a_wrong_tie():
    scores = torch.zeros(1, 8)
    indices, values = shard_reference.shard_lists(scores, 2, [(0, 4), (4, 4)], sorted=True)
    indices[0, 0] = torch.tensor([2, 3], dtype=torch.int32)  # not the smallest tied keys
    got, _ = shard_reference.merge_lists(indices, values, 2, sorted=True)
    assert not torch.equal(got, reference.topk_rows(scores, 2, sorted=True))


def gather_and_merge(rank, world, shards, k, init):
    """One rank: its lists packed as ShardedTopk packs them, gathered through the product's
    gather_candidates on gloo, merged by the reference; checked against the unsharded top-k."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        total = sum(n for _, n in shards)
        scores = tied_scores(5, total, seed=3)
        indices, values = shard_reference.shard_lists(scores, k, shards, sorted=True)
        rows = scores.shape[0]
        local = torch.empty(rows, 2 * k, dtype=torch.int32)
        mine_i, mine_s = sharded.candidate_views(local, k)
        mine_i.copy_(indices[rank])
        mine_s.copy_(values[rank])
        gathered = torch.full((world * (rows + 2) * 2 * k,), 7, dtype=torch.int32)
        lists = sharded.gather_candidates(local, gathered, world)
        all_i, all_s = sharded.candidate_views(lists, k)
        assert all_i.shape == (world, rows, k) and all_s.dtype == torch.float32
        assert torch.equal(all_i, indices[:world])
        got, _ = shard_reference.merge_lists(all_i, all_s, k, sorted=True)
        want = reference.topk_rows(scores.to(torch.float64), k, relative=False, sorted=True)
        assert torch.equal(got, want)
    finally:
        dist.destroy_process_group()


def test_gather_candidates_on_gloo_world_size_1(tmp_path):
    gather_and_merge(0, 1, [(0, 48)], 12, f"file://{tmp_path}/rendezvous")


def test_gather_candidates_on_gloo_world_size_2(tmp_path):
    mp.spawn(gather_and_merge, args=(2, [(0, 30), (30, 33)], 12,
                                     f"file://{tmp_path}/rendezvous"), nprocs=2, join=True)


def test_without_a_process_group_it_says_so(ctx):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        winnow.ShardedTopk(ctx, key_offset=0, shard_keys=8, total_keys=8, max_rows=4,
                           score="ip", k=4, arch="sm_90a")


@pytest.mark.parametrize("fields, text", [
    (dict(k=0), "k = 0 is outside"), (dict(k=9000), "k = 9000 is outside"),
    (dict(max_rows=0), "max_rows = 0"),
])
def test_k_and_max_rows_out_of_range(ctx, fields, text):
    args = dict(key_offset=0, shard_keys=8, total_keys=8, max_rows=4, score="ip", k=4,
                arch="sm_90a")
    args.update(fields)
    with pytest.raises(InvalidArgument, match=text):
        winnow.ShardedTopk(ctx, **args)


def test_a_gloo_group_is_refused(ctx, tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        with pytest.raises(InvalidArgument, match="backend is 'gloo'.*needs 'nccl'"):
            winnow.ShardedTopk(ctx, key_offset=0, shard_keys=8, total_keys=8, max_rows=4,
                               score="ip", k=4, arch="sm_90a")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("shards, total, text", [
    ([(0, 10), (8, 10)], 18, "overlap at key 8"), ([(0, 10), (12, 6)], 18, "gap at key 10"),
    ([(0, 10), (10, 6)], 18, "end at key 16, total_keys is 18"),
    ([(2, 10), (12, 6)], 18, "gap at key 0"),
])
def test_shards_must_cover_the_keys_once(shards, total, text):
    with pytest.raises(InvalidArgument, match=text):
        sharded.check_shards(shards, total)
    sharded.check_shards([(10, 8), (0, 10)], 18)


def test_merge_plan_sizes_and_refuses_cpu_lists(ctx):
    plan = winnow.MergePlan(ctx, ranks=2, max_rows=4, k=8, arch="sm_90a", build=False)
    try:
        assert plan.workspace_size == 256 + 4 * 8 * 8 * 3
        lists = torch.zeros(2, 4, 8, dtype=torch.int32)
        out = torch.zeros(4, 8, dtype=torch.int32)
        with pytest.raises(InvalidArgument, match="local_indices: device is -1"):
            plan.merge_gathered(lists, lists.float(), out=out)
    finally:
        plan.close()
    with pytest.raises(InvalidArgument, match="ranks = 0"):
        winnow.MergePlan(ctx, ranks=0, max_rows=4, k=8, arch="sm_90a", build=False)

