"""[gpu] The sharded top-k on one GPU (issue 19): MergePlan.merge_gathered of CPU-made shard
lists equals the reference merge; ShardedTopk on an NCCL group of world size 1 equals one
TopkPlan over all keys."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import winnow  # noqa: E402
from winnow.testing import shard_reference  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("sorted", [False, True])
def test_merge_gathered_equals_the_reference_merge(ctx, sorted):
    shards, k = [(0, 300), (300, 212), (512, 100)], 64
    g = torch.Generator().manual_seed(5)
    scores = torch.randint(-4, 5, (16, 612), generator=g).to(torch.float32)
    scores[0, 7] = scores[3, 400] = float("nan")
    indices, values = shard_reference.shard_lists(scores, k, shards, sorted=sorted)
    want, want_scores = shard_reference.merge_lists(indices, values, k, sorted=sorted)
    plan = winnow.MergePlan(ctx, ranks=3, max_rows=16, k=k, sorted=sorted)
    out = torch.empty(16, k, dtype=torch.int32, device="cuda")
    out_scores = torch.empty(16, k, dtype=torch.float32, device="cuda")
    plan.merge_gathered(indices.cuda(), values.cuda(), out=out, out_scores=out_scores)
    assert torch.equal(out.cpu(), want)
    assert torch.equal(out_scores.cpu().nan_to_num(), want_scores.nan_to_num())


def test_sharded_topk_world_size_1_equals_one_plan(ctx, tmp_path):
    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        g = torch.Generator().manual_seed(2)
        q = torch.randint(-2, 3, (32, 128), generator=g).half().cuda()
        keys = torch.randint(-2, 3, (4096, 128), generator=g).half().cuda()
        fields = dict(score="ip", heads=1, q_dtype="fp16", k_dtype="fp16", key_scale=False,
                      k=64, sorted=True)
        one = ctx.topk_plan(**fields)
        want = torch.empty(32, 64, dtype=torch.int32, device="cuda")
        one.execute(q, keys, out=want)
        sharded = winnow.ShardedTopk(ctx, key_offset=0, shard_keys=4096, total_keys=4096,
                                     max_rows=32, **fields)
        got, _ = sharded(q, keys)
        assert torch.equal(got.cpu(), want.cpu())
    finally:
        dist.destroy_process_group()


def test_sharded_l2_with_key_norms_world_size_1_equals_one_plan(ctx, tmp_path):
    """key_norms pass through ShardedTopk to the shard's plan: norms 0.5-2x each key's own
    (a plan that summed the squares instead would rank differently)."""
    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        g = torch.Generator().manual_seed(3)
        q = torch.randn(16, 128, generator=g).half().cuda()
        keys = torch.randn(4096, 128, generator=g).half().cuda()
        own = (keys.float() ** 2).sum(dim=1)
        norms = (own * (0.5 + 1.5 * torch.rand(4096, generator=g).cuda())).contiguous()
        fields = dict(score="l2", heads=1, q_dtype="fp16", k_dtype="fp16", key_scale=False,
                      k=64, sorted=True)
        one = ctx.topk_plan(**fields)
        want = torch.empty(16, 64, dtype=torch.int32, device="cuda")
        one.execute(q, keys, key_norms=norms, out=want)
        summed = torch.empty(16, 64, dtype=torch.int32, device="cuda")
        one.execute(q, keys, out=summed)
        assert not torch.equal(want.cpu(), summed.cpu())  # the norms change the answer
        sharded = winnow.ShardedTopk(ctx, key_offset=0, shard_keys=4096, total_keys=4096,
                                     max_rows=16, **fields)
        got, _ = sharded(q, keys, key_norms=norms)
        assert torch.equal(got.cpu(), want.cpu())
    finally:
        dist.destroy_process_group()
