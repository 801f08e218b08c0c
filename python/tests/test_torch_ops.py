"""The torch layer without a GPU: tensors reach the C checks (their messages as exceptions),
fake and meta implementations give the ops' shapes, torch.compile traces the ops."""
import pytest

torch = pytest.importorskip("torch")
import winnow  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

T, H, N, K = 8, 4, 256, 16


@pytest.fixture(scope="module")
def plan(ctx, arch):
    return ctx.topk_plan(arch=arch, heads=H, k=K, window="ranges")


def cpu_inputs(q_dtype=torch.float8_e4m3fn, device="cpu"):
    q = torch.zeros(T, H, 128, device=device).to(q_dtype)
    k = torch.zeros(N, 128, device=device).to(torch.float8_e4m3fn)
    w = torch.zeros(T, H, device=device)
    ks = torch.zeros(T, dtype=torch.int32, device=device)
    return q, k, w, torch.ones(N, device=device), ks, ks + N


def test_a_wrong_dtype_is_the_c_librarys_message(plan):
    q, k, w, s, ks, ke = cpu_inputs(torch.bfloat16)
    with pytest.raises(winnow.InvalidArgument, match=r"^q: dtype is bf16, expected fp8_e4m3$"):
        winnow.indexer_topk(plan, q, k, w, s, ks, ke)
    # The later checks (key_scale, windows, out) come after q's device check: test_gpu.py.


def test_a_cpu_tensor_is_refused_by_the_device_check(plan):
    with pytest.raises(winnow.InvalidArgument, match="q: device is -1, but the context is on "
                                                     "device 0"):
        winnow.indexer_topk(plan, *cpu_inputs())


def test_a_torch_dtype_without_a_winnow_dtype(plan):
    q, k, w, s, ks, ke = cpu_inputs()
    with pytest.raises(winnow.InvalidArgument, match="k: torch dtype torch.int64"):
        winnow.indexer_topk(plan, q, k.to(torch.int64), w, s, ks, ke)


# Through torch.ops, the C++ kernels (the torch extension) raise RuntimeError; the Python
# implementations ValueError. winnow.indexer_topk raises ValueError on both paths.
PLAN_ERROR = RuntimeError if winnow.fast_ops_loaded() else ValueError


def test_an_unknown_plan_id():
    with pytest.raises(PLAN_ERROR, match="no open TopkPlan with id 999999"):
        torch.ops.winnow.indexer_topk(999999, *[torch.empty(1)] * 2)


def test_materialize_plans_are_not_ops(ctx):
    p = ctx.topk_plan(arch="sm_90a", heads=H, mode="materialize", build=False)
    with pytest.raises(PLAN_ERROR, match="materialize plan"):
        torch.ops.winnow.indexer_topk(p.id, *cpu_inputs()[:2])
    with pytest.raises(ValueError, match="materialize plan"):
        winnow.indexer_topk(p, *cpu_inputs()[:2])
    p.close()


def fake_cuda(*tensors):
    return [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in tensors]


def test_fake_shapes_of_every_op(ctx, plan):
    knn_plan = ctx.topk_plan(arch="sm_90a", score="ip", heads=1, head_dim=64, q_dtype="fp16",
                             k_dtype="fp16", key_scale=False, k=32, build=False)
    stream_plan = ctx.topk_plan(arch="sm_90a", heads=H, k=K, window="causal", build=False)
    block_plan = ctx.block_plan(arch="sm_90a", max_seq_len=4096, build=False)
    with FakeTensorMode():
        q, k, w, s, ks, ke = fake_cuda(*cpu_inputs())
        out = winnow.indexer_topk(plan, q, k, w, s, ks, ke)
        assert (out.shape, out.dtype, out.device.type) == ((T, K), torch.int32, "cuda")
        buffer = torch.empty(2 * T, 2048, dtype=torch.int32, device="cuda")
        assert winnow.indexer_topk(plan, q, k, w, s, ks, ke, out=buffer[:T, :K]) is not None
        qi, ki = torch.empty(5, 64, dtype=torch.float16, device="cuda"), \
            torch.empty(1000, 64, dtype=torch.float16, device="cuda")
        idx, scores = winnow.knn(knn_plan, qi, ki)
        assert (idx.shape, idx.dtype, scores.shape, scores.dtype) == \
            ((5, 32), torch.int32, (5, 32), torch.float32)
        assert winnow.stream_topk(stream_plan, q, k, w, s).shape == (T, K)
        bq = torch.empty(1024, 32, 128, dtype=torch.bfloat16, device="cuda")
        bk = torch.empty(1024, 8, 128, dtype=torch.bfloat16, device="cuda")
        offsets, indices = winnow.block_select(block_plan, bq, bk)
        assert offsets.shape == (32 * 8 + 1,) and indices.shape == (32 * 8 * 9 // 2,)
        assert winnow.block_attention(block_plan, bq, bk, bk, offsets, indices).shape == bq.shape
    for p in (knn_plan, stream_plan, block_plan):
        p.close()


def test_the_out_variant_checks_the_buffers_shape_when_traced(plan):
    with FakeTensorMode():
        q, k, w, s, ks, ke = fake_cuda(*cpu_inputs())
        with pytest.raises(ValueError, match=r"expected \[rows, k\] = \[8, 16\]"):
            winnow.indexer_topk(plan, q, k, w, s, ks, ke,
                                out=torch.empty(T, K + 1, dtype=torch.int32, device="cuda"))


def test_meta_tensors(plan):
    out = winnow.indexer_topk(plan, *[t.to("meta") for t in cpu_inputs()])
    assert out.device.type == "meta" and out.shape == (T, K)


def test_torch_compile_traces_the_op(plan):
    def f(q, k, w, s, ks, ke):
        return winnow.indexer_topk(plan, q, k, w, s, ks, ke) + 1

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(*[t.to("meta") for t in cpu_inputs()])
    assert out.shape == (T, K) and out.dtype == torch.int32


def test_make_fx_graph_holds_the_op(plan):
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, w, s, ks, ke):
        return winnow.indexer_topk(plan, q, k, w, s, ks, ke)

    graph = make_fx(f, tracing_mode="fake")(*cpu_inputs())
    assert "torch.ops.winnow.indexer_topk.default" in graph.code


# ---- key_norms (WINNOW_INPUT_KEY_NORMS): |k|^2 from the caller, for l2 and cosine ----
def knn_plan(ctx, score, **fields):
    return ctx.topk_plan(arch="sm_90a", score=score, heads=1, head_dim=64, q_dtype="fp16",
                         k_dtype="fp16", key_scale=False, k=32, build=False, **fields)


def knn_inputs(device="cpu", rows=5, keys=1000):
    q = torch.zeros(rows, 64, dtype=torch.float16, device=device)
    k = torch.zeros(keys, 64, dtype=torch.float16, device=device)
    return q, k, torch.ones(keys, device=device)


def test_the_knn_schema_takes_key_norms():
    assert str(torch.ops.winnow.knn.default._schema) == (
        "winnow::knn(int plan, Tensor q, Tensor k, Tensor? key_norms=None) -> (Tensor, Tensor)")


def test_fake_and_meta_knn_with_key_norms(ctx):
    p = knn_plan(ctx, "l2")
    with FakeTensorMode():
        idx, scores = winnow.knn(p, *fake_cuda(*knn_inputs()))
        assert (idx.shape, idx.dtype, scores.shape, scores.dtype, idx.device.type) == \
            ((5, 32), torch.int32, (5, 32), torch.float32, "cuda")
    idx, scores = winnow.knn(p, *[t.to("meta") for t in knn_inputs()])
    assert idx.device.type == "meta" and idx.shape == scores.shape == (5, 32)
    p.close()


def test_make_fx_graph_passes_key_norms_to_the_op(ctx):
    from torch.fx.experimental.proxy_tensor import make_fx
    p = knn_plan(ctx, "l2")
    graph = make_fx(lambda q, k, n: winnow.knn(p, q, k, n), tracing_mode="fake")(*knn_inputs())
    calls = [n for n in graph.graph.nodes if n.target is torch.ops.winnow.knn.default]
    assert len(calls) == 1 and len(calls[0].args) == 4 and calls[0].args[3].op == "placeholder"
    p.close()


def test_key_norms_of_a_torch_dtype_without_a_winnow_dtype(ctx):
    p = knn_plan(ctx, "l2")
    q, k, norms = knn_inputs()
    with pytest.raises(winnow.InvalidArgument, match="^key_norms: torch dtype torch.float64 "
                                                     "has no winnow dtype"):
        winnow.knn(p, q, k, norms.double())
    p.close()


class OnDevice0:
    """A CPU tensor that tells the C library it is on device 0, so that the C checks past the
    device check run without a GPU (they read no data; a plan that is not built refuses the
    call after them)."""

    def __init__(self, t):
        self._t, self.dtype, self.shape = t, t.dtype, t.shape

    def data_ptr(self):
        return self._t.data_ptr()

    def stride(self):
        return self._t.stride()

    def get_device(self):
        return 0


def execute_on_device0(plan, q, k, key_norms):
    out = torch.empty(q.shape[0], plan.k, dtype=torch.int32)
    scores = torch.empty(q.shape[0], plan.k)
    plan.execute(OnDevice0(q), OnDevice0(k),
                 key_norms=None if key_norms is None else OnDevice0(key_norms),
                 out=OnDevice0(out), out_scores=OnDevice0(scores))


@pytest.mark.parametrize("score", ["l2", "cosine"])
def test_the_c_checks_of_key_norms(ctx, score):
    p = knn_plan(ctx, score)
    q, k, norms = knn_inputs()
    for given in (None, norms):  # both pass the checks
        with pytest.raises(winnow.NotBuilt):
            execute_on_device0(p, q, k, given)
    with pytest.raises(winnow.InvalidArgument, match=r"^key_norms: dtype is fp16, expected fp32$"):
        execute_on_device0(p, q, k, norms.half())
    with pytest.raises(winnow.InvalidArgument, match=r"^key_norms: shape\[0\] is 1001 "):
        execute_on_device0(p, q, k, torch.ones(1001))
    with pytest.raises(winnow.InvalidArgument, match=r"^key_norms: strides\[0\] is 2, "):
        execute_on_device0(p, q, k, torch.ones(2000)[::2])
    p.close()


def test_key_norms_are_refused_for_a_score_that_reads_no_ksq(ctx):
    p = knn_plan(ctx, "ip")
    q, k, norms = knn_inputs()
    with pytest.raises(winnow.InvalidArgument, match=r"^key_norms given, but the score program "
                                                     r"does not read ksq \(\|k\|\^2: l2, "
                                                     r"cosine\)$"):
        execute_on_device0(p, q, k, norms)
    with pytest.raises(winnow.NotBuilt):  # the next call's slot is cleared
        execute_on_device0(p, q, k, None)
    p.close()
    indexer = ctx.topk_plan(arch="sm_90a", heads=H, k=K, window="causal", build=False)
    q, k, w, s, _, _ = cpu_inputs()
    with pytest.raises(winnow.InvalidArgument, match="does not read ksq"):
        indexer.execute_stream(*map(OnDevice0, (q, k, w, s)), key_norms=OnDevice0(torch.ones(N)),
                               out=OnDevice0(torch.empty(T, K, dtype=torch.int32)))
    indexer.close()
