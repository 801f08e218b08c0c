"""The decode op's torch layer without a GPU: plan refusals and CPU tensors carry the C
messages, fake and meta implementations give [B * next_n, k], torch.compile and make_fx
trace the op, the vLLM adapter's plan choice."""
import pytest

torch = pytest.importorskip("torch")
import winnow  # noqa: E402
from winnow import vllm  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

B, NEXT_N, H, K, BLOCKS = 3, 2, 4, 16, 8


@pytest.fixture(scope="module")
def plan(ctx, arch):
    return ctx.paged_plan(arch=arch, heads=H, k=K, next_n=NEXT_N, max_batch=4,
                          max_blocks_per_seq=BLOCKS)


def cpu_inputs(q_dtype=torch.float8_e4m3fn, device="cpu", per_query=False):
    q = torch.zeros(B, NEXT_N, H, 128, device=device).to(q_dtype)
    cache = torch.zeros(20, 64, 1, 132, dtype=torch.uint8, device=device)
    table = torch.zeros(B, BLOCKS, dtype=torch.int32, device=device)
    lens = torch.full((B, NEXT_N) if per_query else (B,), 100, dtype=torch.int32, device=device)
    w = torch.zeros(B * NEXT_N, H, device=device)
    return q, cache, table, lens, w


@pytest.mark.parametrize("fields, message", [
    (dict(k=0), "k = 0"), (dict(k=9000), "k = 9000 exceeds the maximum 8192"),
    (dict(next_n=5), r"next_n = 5 is outside \[1, 4\]"),
    (dict(max_blocks_per_seq=0), "max_blocks_per_seq = 0 is outside"),
    (dict(max_batch=0), "max_batch = 0 is outside"),
    (dict(max_total_keys=-1), "max_total_keys = -1 is outside"),
    (dict(max_batch=1 << 20, max_blocks_per_seq=1 << 14), "give max_total_keys"),
    (dict(heads=0), "heads = 0"),
])
def test_plan_refusals_carry_the_c_message(ctx, fields, message):
    args = dict(arch="sm_90a", max_blocks_per_seq=BLOCKS, build=False)
    args.update(fields)
    with pytest.raises(winnow.InvalidArgument, match=message):
        ctx.paged_plan(**args)


def test_an_arch_without_the_kernels(ctx):
    with pytest.raises(winnow.NotSupported, match="sm_80"):
        ctx.paged_plan(arch="sm_80", max_blocks_per_seq=BLOCKS, build=False)


def test_a_wrong_q_dtype_is_the_c_librarys_message(plan):
    with pytest.raises(winnow.InvalidArgument, match=r"^q: dtype is bf16, expected fp8_e4m3$"):
        winnow.paged_indexer_topk(plan, *cpu_inputs(torch.bfloat16))


def test_a_cpu_tensor_is_refused_by_the_device_check(plan):
    with pytest.raises(winnow.InvalidArgument, match="q: device is -1, but the context is on "
                                                     "device 0"):
        winnow.paged_indexer_topk(plan, *cpu_inputs())
    # The checks past q's device (cache, block table, lengths, out): test_paged_gpu.py.


def test_a_missing_input_is_named(plan):
    q, cache, table, lens, w = cpu_inputs()
    with pytest.raises(winnow.InvalidArgument, match="q missing"):
        plan.execute(None, cache, table, lens, w, out=None)


def test_a_torch_dtype_without_a_winnow_dtype(plan):
    q, cache, table, lens, w = cpu_inputs()
    with pytest.raises(winnow.InvalidArgument, match="block_table: torch dtype torch.int64"):
        winnow.paged_indexer_topk(plan, q, cache, table.long(), lens, w)


def test_an_unknown_or_wrong_plan(ctx):
    with pytest.raises(ValueError, match="no open PagedPlan with id 999999"):
        torch.ops.winnow.paged_indexer_topk(999999, *cpu_inputs())
    topk = ctx.topk_plan(arch="sm_90a", heads=H, k=K, build=False)
    with pytest.raises(ValueError, match=f"no open PagedPlan with id {topk.id}"):
        winnow.paged_indexer_topk(topk, *cpu_inputs())
    topk.close()


def fake_cuda(*tensors):
    return [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in tensors]


@pytest.mark.parametrize("per_query", [False, True])
def test_fake_shapes(plan, per_query):
    with FakeTensorMode():
        inputs = fake_cuda(*cpu_inputs(per_query=per_query))
        out = winnow.paged_indexer_topk(plan, *inputs)
        assert (out.shape, out.dtype, out.device.type) == ((B * NEXT_N, K), torch.int32, "cuda")
        buffer = torch.empty(64, 2048, dtype=torch.int32, device="cuda")
        assert winnow.paged_indexer_topk(plan, *inputs, out=buffer[:B * NEXT_N, :K]) is not None


def test_the_out_variant_checks_the_buffers_shape_when_traced(plan):
    with FakeTensorMode():
        inputs = fake_cuda(*cpu_inputs())
        with pytest.raises(ValueError, match=r"expected \[B \* next_n, k\] = \[6, 16\]"):
            winnow.paged_indexer_topk(plan, *inputs,
                                      out=torch.empty(B, K, dtype=torch.int32, device="cuda"))


def test_meta_tensors(plan):
    out = winnow.paged_indexer_topk(plan, *[t.to("meta") for t in cpu_inputs()])
    assert out.device.type == "meta" and out.shape == (B * NEXT_N, K)


def test_torch_compile_traces_the_op(plan):
    def f(q, cache, table, lens, w):
        return winnow.paged_indexer_topk(plan, q, cache, table, lens, w) + 1

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(*[t.to("meta") for t in cpu_inputs()])
    assert out.shape == (B * NEXT_N, K) and out.dtype == torch.int32


def test_make_fx_graph_holds_the_op(plan):
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, cache, table, lens, w):
        out = torch.full((B * NEXT_N, K), -1, dtype=torch.int32)
        torch.ops.winnow.paged_indexer_topk_out(plan.id, q, cache, table, lens, w, out=out)
        return out

    graph = make_fx(f, tracing_mode="fake")(*cpu_inputs())
    assert "torch.ops.winnow.paged_indexer_topk_out.default" in graph.code


def test_workspace_needs_a_gpu_to_size(plan):
    if winnow._device.gpu_available():
        assert plan.workspace is not None and plan.workspace.numel() >= plan.workspace_size
    else:
        assert plan.workspace is None
        with pytest.raises(ValueError, match="no workspace"):
            plan.counters()


def test_vllm_blocks_per_seq_is_the_model_length_in_blocks():
    table = torch.zeros(2, 100, dtype=torch.int32)
    assert vllm.decode_blocks_per_seq(64, table) == 1
    assert vllm.decode_blocks_per_seq(65, table) == 2
    assert vllm.decode_blocks_per_seq(1 << 20, table) == 100  # at most the table's width


def test_vllm_decode_indexers_are_kept_and_reused_by_batch(monkeypatch):
    made = []

    class Recorder:
        def __init__(self, heads, topk, next_n, *, max_batch, max_blocks_per_seq,
                     max_total_keys, device):
            self.max_batch = max_batch
            made.append(self)

    monkeypatch.setattr(vllm, "DecodeIndexer", Recorder)
    monkeypatch.setattr(vllm, "_decode_indexers", {})
    five = vllm.decode_indexer(H, K, 1, batch=5, max_blocks_per_seq=BLOCKS)
    assert five.max_batch == 8
    assert vllm.decode_indexer(H, K, 1, batch=8, max_blocks_per_seq=BLOCKS) is five
    one = vllm.decode_indexer(H, K, 1, batch=1, max_blocks_per_seq=BLOCKS)
    assert one is five  # the smallest built one that fits
    nine = vllm.decode_indexer(H, K, 1, batch=9, max_blocks_per_seq=BLOCKS)
    assert nine.max_batch == 16 and five in vllm._decode_indexers[(0, H, K, 1, BLOCKS)]
    other = vllm.decode_indexer(H, K, 2, batch=1, max_blocks_per_seq=BLOCKS)
    assert other.max_batch == 1 and len(made) == 3


def test_vllm_slot_declines_to_build_during_a_capture(monkeypatch):
    monkeypatch.setattr(vllm, "_decode_indexers", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    q, cache, table, lens, w = cpu_inputs()
    out = torch.full((B * NEXT_N, K), -1, dtype=torch.int32)
    assert vllm.fp8_paged_mqa_topk_indices(q, cache, w, lens, table, BLOCKS * 64, out) is False
    assert vllm._decode_indexers == {} and (out == -1).all()
