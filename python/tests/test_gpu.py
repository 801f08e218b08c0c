"""[gpu] The Python ops on a GPU against the torch references (winnow.testing): exact data
(integer scores, heavy ties) must give exactly the reference's keys; random fp8 data the
reference's up to fp8 rounding. Also: torch.compile equals eager, CUDA-graph replay equals
eager, the streaming driver equals one call, the C checks past the device check."""
import pytest

torch = pytest.importorskip("torch")
import winnow  # noqa: E402
from winnow import sglang, vllm  # noqa: E402
from winnow.testing import cuda_graph, data, reference  # noqa: E402

pytestmark = pytest.mark.gpu
T, H, N, TOPK = 64, 64, 4096, 2048


def on_gpu(*tensors):
    return [t.cuda() for t in tensors]


@pytest.fixture(scope="module")
def exact():
    """(cpu tensors, gpu tensors) of an exact-score vLLM-format problem."""
    cpu = data.indexer_inputs(T, H, N, seed=11)
    return cpu, on_gpu(*cpu)


@pytest.fixture(scope="module")
def indexer(ctx):
    return ctx.topk_plan(heads=H, k=TOPK, window="ranges")


def test_indexer_topk_equals_the_reference_on_exact_data(indexer, exact):
    cpu, gpu = exact
    got = winnow.indexer_topk(indexer, *reorder(gpu)).cpu()
    assert torch.equal(got, reference.vllm_prefill_topk(*cpu, topk=TOPK))


def reorder(t):
    """(q, k, k_scale, weights, ks, ke) -> the op's order (q, k, weights, key_scale, ks, ke)."""
    q, k, scale, w, ks, ke = t
    return q, k, w, scale, ks, ke


def test_sorted_output_is_the_rank_order(ctx, exact):
    cpu, gpu = exact
    plan = ctx.topk_plan(heads=H, k=TOPK, window="ranges", sorted=True)
    got = winnow.indexer_topk(plan, *reorder(gpu)).cpu()
    q, k, scale, w, ks, ke = cpu
    want = reference.topk_rows(reference.indexer_logits(q, k, scale, w), TOPK, ks, ke,
                               sorted=True)
    assert torch.equal(got, want)


def test_vllm_adapter_writes_the_callers_buffer(exact):
    cpu, gpu = exact
    buffer = torch.full((T + 16, 2048), -7, dtype=torch.int32, device="cuda")
    vllm.prefill_indexer(heads=H)(*gpu, buffer)
    assert torch.equal(buffer[:T].cpu(), reference.vllm_prefill_topk(*cpu))
    assert bool((buffer[T:] == -7).all())  # rows past T untouched
    again = torch.zeros_like(buffer)
    q, k, scale, w, ks, ke = gpu
    scale_bytes = scale.view(torch.uint8).view(N, 4)  # vLLM's uint8 [N, 4] scale form
    assert vllm.fp8_mqa_topk_indices(q, (k, scale_bytes), w, ks, ke, again)
    assert torch.equal(again[:T], buffer[:T])


def test_vllm_adapter_on_random_fp8_data():
    g = torch.Generator().manual_seed(5)
    q = (torch.randn(T, H, 128, generator=g)).to(torch.float8_e4m3fn)
    k = (torch.randn(N, 128, generator=g)).to(torch.float8_e4m3fn)
    scale = torch.rand(N, generator=g) + 0.5
    w = torch.randn(T, H, generator=g)
    ks = torch.randint(0, N // 2, (T,), generator=g, dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(1, N, (T,), generator=g, dtype=torch.int32),
                       torch.tensor(N, dtype=torch.int32))
    buffer = torch.empty(T, 2048, dtype=torch.int32, device="cuda")
    vllm.prefill_indexer(heads=H)(*on_gpu(q, k, scale, w, ks, ke), buffer)
    logits = reference.indexer_logits(q, k, scale, w)
    # fp8 tensor-core sums carry fewer bits than fp32 (docs/semantics.md): 2^-14 of the
    # score's magnitude, as the C++ tests allow.
    magnitude = reference.indexer_logits(q.float().abs(), k.float().abs(), scale, w.abs())
    tol = float(magnitude.max()) * 2.0 ** -14
    assert reference.selection_within(buffer.cpu(), logits, 2048, ks, ke, tol=tol) is None


def test_sglang_ragged_adapter(exact):
    cpu, gpu = exact
    ragged = sglang.RaggedIndexer(heads=H)
    assert torch.equal(ragged(*gpu).cpu(), reference.sglang_ragged_topk(*cpu))
    offsets = torch.arange(T, dtype=torch.int32) * 1000
    got = ragged(*gpu, offsets=offsets.cuda()).cpu()
    assert torch.equal(got, reference.sglang_ragged_topk(*cpu, offsets=offsets))


def test_knn_equals_the_reference(ctx):
    q, k = data.small_int_corpus(2)
    plan = ctx.topk_plan(score="ip", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True)
    idx, scores = winnow.knn(plan, q.cuda(), k.cuda())
    want = reference.topk_rows(reference.inner_product_scores(q, k), 100, sorted=True)
    assert torch.equal(idx.cpu(), want)
    assert torch.equal(scores.cpu().double(), reference.inner_product_scores(q, k).gather(
        1, want.long()))


def test_knn_l2_distance_output(ctx):
    q, k = data.small_int_corpus(3)
    plan = ctx.topk_plan(score="l2", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True, distance=True)
    idx, dist = winnow.knn(plan, q.cuda(), k.cuda())
    d2 = torch.cdist(q.double(), k.double()) ** 2  # exact: small integers
    want = reference.topk_rows(-d2, 100, sorted=True)
    assert torch.equal(idx.cpu(), want)
    assert torch.equal(dist.cpu().double(), d2.gather(1, want.long()).round())


def test_knn_l2_reads_the_given_key_norms(ctx):
    q, k = data.small_int_corpus(8)
    plan = ctx.topk_plan(score="l2", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True, distance=True)
    own = k.float().square().sum(1)
    norms = 2 * own  # not the keys' own: a kernel that summed the squares would miss
    idx, dist = winnow.knn(plan, q.cuda(), k.cuda(), norms.cuda())
    qf, kf = q.double(), k.double()
    d2 = qf.square().sum(1, keepdim=True) + norms.double()[None, :] - 2 * qf @ kf.T  # exact
    want = reference.topk_rows(-d2, 100, sorted=True)
    assert torch.equal(idx.cpu(), want)
    assert torch.equal(dist.cpu().double(), d2.gather(1, want.long()))
    # The keys' own norms, given, are what the kernel sums (exactly, small integers).
    summed = winnow.knn(plan, q.cuda(), k.cuda())
    given = winnow.knn(plan, q.cuda(), k.cuda(), own.cuda())
    assert all(torch.equal(a, b) for a, b in zip(summed, given))


def test_knn_cosine_reads_the_given_key_norms(ctx):
    q, k = data.small_int_corpus(9, "cuda")
    plan = ctx.topk_plan(score="cosine", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True)
    own = k.float().square().sum(1)
    summed = winnow.knn(plan, q, k)  # exact sums of small integers: the norms given below
    assert all(torch.equal(a, b) for a, b in zip(summed, winnow.knn(plan, q, k, own)))
    # 4x the norms: every cosine halves.
    idx, scores = winnow.knn(plan, q, k, 4 * own)
    qf, kf = q.cpu().double(), k.cpu().double()
    half = (qf @ kf.T) / (qf.norm(dim=1)[:, None] * kf.norm(dim=1)[None, :]) / 2
    assert reference.selection_within(idx.cpu(), half, 100, tol=1e-6) is None
    assert torch.allclose(scores.cpu().double(), half.gather(1, idx.cpu().long()), rtol=1e-6,
                          atol=0)


def test_knn_key_norms_checks(ctx):
    q = torch.zeros(4, 64, dtype=torch.float16, device="cuda")
    k = torch.zeros(1000, 64, dtype=torch.float16, device="cuda")
    small = dict(heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16", key_scale=False, k=16)
    ip = ctx.topk_plan(score="ip", **small)
    with pytest.raises(winnow.InvalidArgument, match="^key_norms given, but the score program "
                                                     "does not read ksq"):
        winnow.knn(ip, q, k, torch.ones(1000, device="cuda"))
    l2 = ctx.topk_plan(score="l2", **small)
    with pytest.raises(winnow.InvalidArgument, match="^key_norms: dtype is fp16, expected fp32$"):
        winnow.knn(l2, q, k, torch.ones(1000, dtype=torch.float16, device="cuda"))
    with pytest.raises(winnow.InvalidArgument, match=r"^key_norms: shape\[0\] is 999 "):
        winnow.knn(l2, q, k, torch.ones(999, device="cuda"))
    with pytest.raises(winnow.InvalidArgument, match="^key_norms: device is -1"):
        winnow.knn(l2, q, k, torch.ones(1000))


def causal_inputs(S, seed):
    q, k, scale, w, _, _ = data.indexer_inputs(S, H, S, seed=seed, ranges=False)
    return q, k, scale, w


def test_stream_topk_equals_one_call_and_the_reference(ctx):
    S = 3000
    q, k, scale, w = causal_inputs(S, 7)
    plan = ctx.topk_plan(heads=H, k=512, window="causal")
    gq, gk, gs, gw = on_gpu(q, k, scale, w)
    streamed = winnow.stream_topk(plan, gq, gk, gw, gs, chunk_rows=700)
    one = winnow.indexer_topk(plan, gq, gk, gw, gs)
    assert torch.equal(streamed, one)
    ends = torch.arange(1, S + 1, dtype=torch.int32)
    want = reference.topk_rows(reference.indexer_logits(q, k, scale, w), 512, None, ends)
    assert torch.equal(streamed.cpu(), want)


def test_c_checks_past_the_device_check(indexer, exact):
    _, (q, k, scale, w, ks, ke) = exact
    with pytest.raises(winnow.InvalidArgument, match="key_scale missing"):
        winnow.indexer_topk(indexer, q, k, w, None, ks, ke)
    with pytest.raises(winnow.InvalidArgument, match="window_start: dtype is fp32"):
        winnow.indexer_topk(indexer, q, k, w, scale, ks.float(), ke)
    with pytest.raises(winnow.InvalidArgument, match="out_indices: shape"):
        winnow.indexer_topk(indexer, q, k, w, scale, ks, ke,
                            out=torch.empty(T, 100, dtype=torch.int32, device="cuda"))
    small = torch.empty(256, dtype=torch.uint8, device="cuda")
    plan = winnow.TopkPlan(indexer.context, heads=H, k=TOPK, window="ranges", workspace=small)
    with pytest.raises(winnow.WorkspaceTooSmall, match="smaller than"):
        winnow.indexer_topk(plan, q, k, w, scale, ks, ke)


def test_torch_compile_equals_eager(indexer, exact):
    _, gpu = exact

    def f(q, k, w, s, ks, ke):
        idx = torch.ops.winnow.indexer_topk(indexer.id, q, k, w, s, ks, ke)
        return idx, (idx >= 0).sum(dim=1)

    torch._dynamo.reset()
    eager = f(*reorder(gpu))
    compiled = torch.compile(f, fullgraph=True)(*reorder(gpu))
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))


def test_cuda_graph_replay_equals_eager(indexer, exact):
    _, gpu = exact
    static = [t.clone() for t in reorder(gpu)]
    graph, captured = cuda_graph.capture(lambda: winnow.indexer_topk(indexer, *static))
    fresh = data.indexer_inputs(T, H, N, seed=99)
    for dst, src in zip(static, reorder(on_gpu(*fresh))):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, winnow.indexer_topk(indexer, *static))
    assert torch.equal(captured.cpu(), reference.vllm_prefill_topk(*fresh, topk=TOPK))


def test_compiled_with_cuda_graphs_equals_eager(indexer, exact):
    _, gpu = exact

    def f(q, k, w, s, ks, ke):
        return torch.ops.winnow.indexer_topk(indexer.id, q, k, w, s, ks, ke) * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, record, replay
        got = compiled(*reorder(gpu)).clone()
    assert torch.equal(got, f(*reorder(gpu)))


def blocks_of(offsets, indices, row):
    return indices[offsets[row]:offsets[row + 1]].tolist()


def test_block_select_rules_and_block_attention(ctx):
    L, Hq, Hkv, d = 1024, 32, 8, 128
    nb = L // 128
    plan = ctx.block_plan(heads=Hq, kv_heads=Hkv, head_dim=d, max_seq_len=L)
    g = torch.Generator().manual_seed(4)
    q, k, v = [torch.randn(L, h, d, generator=g).to(torch.bfloat16).cuda()
               for h in (Hq, Hkv, Hkv)]
    offsets, indices = winnow.block_select(plan, q, k)
    direct_offsets = torch.empty_like(offsets)
    direct_indices = torch.zeros_like(indices)
    plan.select(q, k, out_offsets=direct_offsets, out_indices=direct_indices)
    assert torch.equal(offsets, direct_offsets)
    o, ix = offsets.cpu(), indices.cpu()
    assert o[0] == 0 and bool((o[1:] >= o[:-1]).all()) and o[-1] <= plan.index_capacity(L)
    assert torch.equal(ix[:o[-1]], direct_indices.cpu()[:o[-1]])
    for h in range(Hq):
        for i in range(nb):
            kept = blocks_of(o, ix, h * nb + i)
            assert kept == sorted(set(kept)) and all(0 <= j <= i for j in kept)
            assert 0 in kept and i in kept and (i == 0 or i - 1 in kept)  # sink, local 2
            assert len(kept) >= min(4, i + 1)  # min_blocks
    out = winnow.block_attention(plan, q, k, v, offsets, indices)
    want = masked_attention(q, k, v, o, ix, nb)
    # bf16 in and out, bf16 probabilities in the P V product: the C++ [gpu] tests' bound
    assert bool(((out.float() - want).abs() <= 1e-2 + 1e-2 * want.abs()).all())


def masked_attention(q, k, v, offsets, indices, nb):
    """Causal attention restricted to each (head, query block)'s kept key blocks, fp32."""
    L, Hq, d = q.shape
    group = Hq // k.shape[1]
    pos = torch.arange(L, device=q.device)
    out = torch.empty(L, Hq, d, device=q.device)
    for h in range(Hq):
        keep = torch.zeros(nb, nb, dtype=torch.bool)
        for i in range(nb):
            keep[i, blocks_of(offsets, indices, h * nb + i)] = True
        mask = keep.cuda().repeat_interleave(128, 0).repeat_interleave(128, 1)
        mask &= pos[None, :] <= pos[:, None]
        s = (q[:, h].float() @ k[:, h // group].float().T) / d ** 0.5
        p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=1)
        out[:, h] = p @ v[:, h // group].float()
    return out
