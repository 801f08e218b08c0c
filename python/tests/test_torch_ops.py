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
