"""[gpu] The decode op (torch.ops.winnow.paged_indexer_topk) and the vLLM decode adapter on
a GPU against the CPU reference (winnow.testing.reference.paged_decode_topk): exact data
(integer scores, heavy ties, NaN keys) must give exactly the reference's positions; CUDA
graph replay with other lengths equals eager; torch.compile equals eager; the C checks
past the device check; bad requests give -1 rows and are counted."""
import pytest

torch = pytest.importorskip("torch")
import winnow  # noqa: E402
from winnow import vllm  # noqa: E402
from winnow.testing import cuda_graph, data, reference  # noqa: E402

pytestmark = pytest.mark.gpu
H, BLOCKS, MAX_BATCH = 64, 64, 16  # lengths up to 4096
EDGE_LENS = [0, 1, 63, 64, 65, 2047, 2048, 2049, 3000, 4096]


def on_gpu(*tensors):
    return [t.cuda() for t in tensors]


def op_order(q, cache, w, lens, table):
    """data.paged_inputs' order -> the op's (q, cache, block_table, context_lens, weights)."""
    return q, cache, table, lens, w


@pytest.fixture(scope="module")
def plans(ctx):
    made = {}

    def get(k, next_n, sorted=False):
        if (k, next_n, sorted) not in made:
            made[k, next_n, sorted] = ctx.paged_plan(heads=H, k=k, next_n=next_n,
                                                     max_batch=MAX_BATCH,
                                                     max_blocks_per_seq=BLOCKS, sorted=sorted)
        return made[k, next_n, sorted]
    return get


def want(cpu, plan):
    return reference.paged_decode_topk(*cpu, topk=plan.k, sorted=plan.desc.sorted != 0,
                                       max_blocks_per_seq=plan.max_blocks_per_seq)


@pytest.mark.parametrize("k", [1, 2048])
@pytest.mark.parametrize("next_n", [1, 3])
@pytest.mark.parametrize("levels, nan_keys", [(2, 0), (1, 0), (2, 40)])
def test_equals_the_reference_at_the_edge_lengths(plans, k, next_n, levels, nan_keys):
    cpu = data.paged_inputs(EDGE_LENS, next_n=next_n, H=H, max_blocks=BLOCKS, levels=levels,
                            nan_keys=nan_keys, seed=100 * k + 10 * next_n + levels + nan_keys)
    plan = plans(k, next_n)
    got = winnow.paged_indexer_topk(plan, *op_order(*on_gpu(*cpu))).cpu()
    assert torch.equal(got, want(cpu, plan))
    assert plan.counters()[1] == 0  # no bad request


@pytest.mark.parametrize("next_n", [2, 4])
def test_per_query_lengths_and_random_lengths(plans, next_n):
    g = torch.Generator().manual_seed(next_n)
    lens = torch.randint(0, BLOCKS * 64 + 1, (MAX_BATCH,), generator=g).tolist()
    cpu = data.paged_inputs(lens, next_n=next_n, H=H, max_blocks=BLOCKS, seed=7 + next_n,
                            lens_per_query=True)
    plan = plans(2048, next_n)
    assert torch.equal(winnow.paged_indexer_topk(plan, *op_order(*on_gpu(*cpu))).cpu(),
                       want(cpu, plan))


def test_sorted_rows_are_the_rank_order(plans):
    cpu = data.paged_inputs([3000, 17, 0], H=H, max_blocks=BLOCKS, levels=1, nan_keys=5, seed=3)
    plan = plans(512, 1, sorted=True)
    assert torch.equal(winnow.paged_indexer_topk(plan, *op_order(*on_gpu(*cpu))).cpu(),
                       want(cpu, plan))


def test_bad_requests_give_minus_one_rows_and_are_counted(plans):
    q, cache, w, lens, table = data.paged_inputs([100, 200, 300], next_n=2, H=H,
                                                 max_blocks=BLOCKS, seed=5)
    table[1, 2] = cache.shape[0] + 10  # a block outside the cache
    lens[2] = BLOCKS * 64 + 1  # above max_blocks_per_seq * 64
    plan = plans(2048, 2)
    got = winnow.paged_indexer_topk(plan, *op_order(*on_gpu(q, cache, w, lens, table))).cpu()
    assert torch.equal(got, want((q, cache, w, lens, table), plan))
    assert (got[2:6] == -1).all() and (got[:2, :99] >= 0).all()  # rows 0, 1 see 99, 100
    assert plan.counters()[1] == 4


def test_the_out_variant_writes_only_its_rows(plans):
    cpu = data.paged_inputs([500, 4096], H=H, max_blocks=BLOCKS, seed=9)
    plan = plans(2048, 1)
    buffer = torch.full((10, 2048), -7, dtype=torch.int32, device="cuda")
    winnow.paged_indexer_topk(plan, *op_order(*on_gpu(*cpu)), out=buffer[:2])
    assert torch.equal(buffer[:2].cpu(), want(cpu, plan)) and bool((buffer[2:] == -7).all())


def test_c_checks_past_the_device_check(plans):
    q, cache, w, lens, table = on_gpu(*data.paged_inputs([100, 200], H=H, max_blocks=BLOCKS))
    plan = plans(2048, 1)
    cases = [
        ((q, cache.view(torch.float8_e4m3fn), table, lens, w), "cache: dtype is fp8_e4m3"),
        ((q, cache.reshape(-1, 64, 132), table, lens, w), "cache"),
        ((q, cache, table[:, :BLOCKS - 1], lens, w), "below max_blocks_per_seq"),
        ((q, cache, table, lens.float(), w), "context_lens: dtype is fp32"),
        ((q, cache, table, lens[:1], w), "context_lens"),
        ((q[:, :, :32].contiguous(), cache, table, lens, w[:, :32].contiguous()), "heads"),
    ]
    for args, message in cases:
        with pytest.raises(winnow.InvalidArgument, match=message):
            winnow.paged_indexer_topk(plan, *args)
    with pytest.raises(winnow.InvalidArgument, match="out_indices"):
        winnow.paged_indexer_topk(plan, q, cache, table, lens, w,
                                  out=torch.empty(2, 100, dtype=torch.int32, device="cuda"))
    big = on_gpu(*data.paged_inputs([1] * (MAX_BATCH + 1), H=H, max_blocks=BLOCKS))
    with pytest.raises(winnow.InvalidArgument, match="above the plan's max_batch"):
        winnow.paged_indexer_topk(plan, *op_order(*big))
    small = torch.empty(256, dtype=torch.uint8, device="cuda")
    tiny = winnow.PagedPlan(plan.context, heads=H, max_batch=MAX_BATCH, max_blocks_per_seq=BLOCKS,
                            workspace=small)
    with pytest.raises(winnow.WorkspaceTooSmall, match="smaller than"):
        winnow.paged_indexer_topk(tiny, q, cache, table, lens, w)


def test_a_hint_gives_the_reference_whatever_it_holds(ctx):
    """The previous step's selection as the hint (PagedPlan.execute's hint): the same
    positions with an exact, a stale, an all -1, a random and an in-place hint. k = 256 over
    128 pages: windows above the list, where the hint replaces the sample."""
    plan = ctx.paged_plan(heads=H, k=256, next_n=2, max_batch=4, max_blocks_per_seq=128)
    cpu = data.paged_inputs([8000, 5000, 100, 0], next_n=2, H=H, max_blocks=128, levels=2,
                            seed=11)
    args = op_order(*on_gpu(*cpu))
    expected = want(cpu, plan)
    out = winnow.paged_indexer_topk(plan, *args)
    assert torch.equal(out.cpu(), expected)
    g = torch.Generator().manual_seed(12)
    hints = [out.clone(), out.flip(0).contiguous(), torch.full_like(out, -1),
             torch.randint(-5, 9000, tuple(out.shape), generator=g,
                           dtype=torch.int32).cuda()]
    for hint in hints:
        assert torch.equal(winnow.paged_indexer_topk(plan, *args, hint=hint).cpu(), expected)
    winnow.paged_indexer_topk(plan, *args, out=out, hint=out)
    assert torch.equal(out.cpu(), expected)
    assert torch.equal(torch.ops.winnow.paged_indexer_topk(plan.id, *args, out).cpu(), expected)


def test_a_bad_hint_is_refused_with_the_c_message(plans):
    q, cache, w, lens, table = on_gpu(*data.paged_inputs([100, 200], H=H, max_blocks=BLOCKS))
    plan = plans(2048, 1)
    good = torch.full((2, 2048), -1, dtype=torch.int32, device="cuda")
    cases = [(good.float(), "hint: dtype is fp32, expected int32"),
             (good[:, :1024], "hint: shape"), (good[:1], "hint: shape"),
             (good.t().contiguous().t(), "hint: strides"),
             (good.reshape(-1), "hint: ndim is 1")]
    for hint, message in cases:
        with pytest.raises(winnow.InvalidArgument, match=message):
            winnow.paged_indexer_topk(plan, q, cache, table, lens, w, hint=hint)


def test_cuda_graph_replay_with_other_lengths_equals_eager(plans):
    """Captured once at MAX_BATCH requests with long lengths, replayed with other lengths,
    block tables and queries: the grid must not depend on the lengths."""
    plan = plans(2048, 2)
    first = data.paged_inputs([BLOCKS * 64] * MAX_BATCH, next_n=2, H=H, max_blocks=BLOCKS,
                              seed=20)
    static = [t.clone() for t in op_order(*on_gpu(*first))]
    graph, captured = cuda_graph.capture(lambda: winnow.paged_indexer_topk(plan, *static))
    g = torch.Generator().manual_seed(21)
    for replay in range(3):
        lens = torch.randint(0, BLOCKS * 64 + 1, (MAX_BATCH,), generator=g).tolist()
        lens[replay] = 0
        fresh = data.paged_inputs(lens, next_n=2, H=H, max_blocks=BLOCKS, seed=30 + replay)
        q, cache, table, ctx_lens, w = op_order(*on_gpu(*fresh))
        # The cache may hold fewer blocks than the captured one: only its first part is used.
        static[0].copy_(q)
        static[1][:cache.shape[0]].copy_(cache)
        static[2].copy_(table)
        static[3].copy_(ctx_lens)
        static[4].copy_(w)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, winnow.paged_indexer_topk(plan, *static))
        assert torch.equal(captured.cpu(), want(fresh, plan))


def test_torch_compile_equals_eager(plans):
    plan = plans(2048, 1)
    gpu = op_order(*on_gpu(*data.paged_inputs([4096, 900, 0, 64], H=H, max_blocks=BLOCKS,
                                              seed=40)))

    def f(q, cache, table, lens, w):
        idx = torch.ops.winnow.paged_indexer_topk(plan.id, q, cache, table, lens, w)
        return idx, (idx >= 0).sum(dim=1)

    torch._dynamo.reset()
    eager = f(*gpu)
    compiled = torch.compile(f, fullgraph=True)(*gpu)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
    cudagraphs = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, record, replay
        got = [t.clone() for t in cudagraphs(*gpu)]
    assert all(torch.equal(a, b) for a, b in zip(eager, got))


@pytest.mark.parametrize("previous_as_hint", [False, True])
@pytest.mark.parametrize("per_query", [False, True])
def test_vllm_decode_slot_writes_the_callers_buffer(per_query, previous_as_hint):
    next_n = 2
    cpu = data.paged_inputs([4096, 1, 2500, 0, 64], next_n=next_n, H=H, max_blocks=BLOCKS,
                            seed=50, lens_per_query=per_query)
    q, cache, w, lens, table = on_gpu(*cpu)
    rows = q.shape[0] * next_n
    buffer = torch.full((rows + 8, 2048), -7, dtype=torch.int32, device="cuda")
    # The buffer's rows of -7 as the hint: no row bounded, the answer the same.
    assert vllm.fp8_paged_mqa_topk_indices(q, cache, w, lens, table, BLOCKS * 64, buffer,
                                           previous_as_hint=previous_as_hint)
    expected = reference.paged_decode_topk(*cpu, topk=2048)
    assert torch.equal(buffer[:rows].cpu(), expected) and bool((buffer[rows:] == -7).all())
    indexer = vllm.decode_indexer(H, 2048, next_n, batch=q.shape[0], max_blocks_per_seq=BLOCKS)
    again = torch.zeros(rows, 2048, dtype=torch.int32, device="cuda")
    assert torch.equal(indexer(q, cache, w, lens, table, again)[:rows], buffer[:rows])
