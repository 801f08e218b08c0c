"""The torch extension (libwinnow_torch.so, the C++ kernels of indexer_topk, indexer_topk_out
and knn): where it is loaded, its kernels are the ops' CUDA and CPU kernels, plans reach it
by id, and its errors carry the C message. Without a GPU the kernels still run up to the C
checks, which refuse CPU tensors. The [gpu] cases compare it with the ctypes path (the Python
implementations, ops._indexer_topk and friends) on the same plan. Without the extension the
cases that need it are skipped, visibly (the loader's cases run anyway)."""
import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
import winnow  # noqa: E402
from winnow import _fast_ops, ops  # noqa: E402
from winnow.testing import data, reference  # noqa: E402

needs_ext = pytest.mark.skipif(not winnow.fast_ops_loaded(),
                               reason=f"WINNOW_SKIP: {winnow.fast_ops_status()}")
T, H, N, K = 8, 4, 256, 16


@pytest.fixture(scope="module")
def plan(ctx, arch):
    return ctx.topk_plan(arch=arch, heads=H, k=K, window="ranges")


def inputs(device="cpu", q_dtype=torch.float8_e4m3fn):
    q = torch.zeros(T, H, 128, device=device).to(q_dtype)
    k = torch.zeros(N, 128, device=device).to(torch.float8_e4m3fn)
    w = torch.zeros(T, H, device=device)
    ks = torch.zeros(T, dtype=torch.int32, device=device)
    return q, k, w, torch.ones(N, device=device), ks, ks + N


CPU_REFUSED = "q: device is -1, but the context is on device 0"


# ---- the loader (runs with or without the extension) ----
def run_python(code, **env):
    """`code` in a fresh interpreter with env added; (returncode, stdout + stderr)."""
    full = dict(os.environ, **env)
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_the_status_names_the_path():
    path = "c++ path" if winnow.fast_ops_loaded() else "ctypes path"
    assert winnow.fast_ops_status().startswith(path)


def test_winnow_torch_ext_0_keeps_the_ctypes_path():
    rc, out = run_python(
        "import winnow, torch\n"
        "print(winnow.fast_ops_loaded(), winnow.fast_ops_status())\n"
        "try:\n"
        "    torch.ops.winnow.indexer_topk(999999, torch.empty(1), torch.empty(1))\n"
        "except ValueError as e:\n"
        "    print('ValueError', e)\n", WINNOW_TORCH_EXT="0")
    assert rc == 0, out
    assert "False ctypes path (WINNOW_TORCH_EXT=0)" in out
    assert "ValueError winnow: no open TopkPlan with id 999999" in out


def test_a_missing_forced_extension_is_an_import_error(tmp_path):
    missing = str(tmp_path / "libwinnow_torch.so")
    rc, out = run_python("import winnow", WINNOW_TORCH_EXT=missing)
    assert rc != 0 and "ImportError" in out and f"WINNOW_TORCH_EXT={missing}" in out


def test_c_messages_become_the_python_paths_exceptions():
    e = _fast_ops.python_error(RuntimeError("WINNOW_STATUS_INVALID_ARGUMENT: q: dtype is bf16"))
    assert isinstance(e, winnow.InvalidArgument) and str(e) == "q: dtype is bf16"
    e = _fast_ops.python_error(RuntimeError("WINNOW_STATUS_WORKSPACE_TOO_SMALL: a\nb"))
    assert isinstance(e, winnow.WorkspaceTooSmall) and str(e) == "a\nb"
    e = _fast_ops.python_error(RuntimeError("winnow: no open TopkPlan with id 3"))
    assert type(e) is ValueError
    assert _fast_ops.python_error(RuntimeError("CUDA error: out of memory")) is None
    assert _fast_ops.python_error(winnow.InvalidArgument(1, "x")) is None


# ---- the extension's kernels, without a GPU ----
@needs_ext
def test_the_extensions_kernels_are_registered_for_cuda_and_cpu():
    for name in ("indexer_topk", "indexer_topk_out", "knn"):
        dump = torch._C._dispatch_dump(f"winnow::{name}")
        for key in ("CUDA", "CPU"):
            lines = [line for line in dump.splitlines() if line.startswith(f"{key}:")]
            assert len(lines) == 1 and "torch_ops.cpp" in lines[0], dump
    # The other ops keep their Python kernels.
    assert "torch_ops.cpp" not in torch._C._dispatch_dump("winnow::stream_topk")


@needs_ext
def test_plans_are_registered_while_open(ctx):
    before = _fast_ops.plan_count()
    p = ctx.topk_plan(arch="sm_90a", heads=H, k=K, build=False)
    block = ctx.block_plan(arch="sm_90a", max_seq_len=4096, build=False)
    assert _fast_ops.plan_count() == before + 1  # block plans are not the extension's
    with pytest.raises(ValueError, match=f"no open TopkPlan with id {block.id} "):
        winnow.indexer_topk(block, *inputs()[:2])
    p.close()
    block.close()
    assert _fast_ops.plan_count() == before
    with pytest.raises(RuntimeError, match=f"^winnow: no open TopkPlan with id {p.id} "):
        torch.ops.winnow.indexer_topk(p.id, *inputs()[:2])
    with pytest.raises(ValueError, match=f"no open TopkPlan with id {p.id} "):
        winnow.indexer_topk(p, *inputs()[:2])


@needs_ext
def test_an_unknown_plan_id_raises():
    for call in (lambda: torch.ops.winnow.indexer_topk(424242, *inputs()[:2]),
                 lambda: torch.ops.winnow.knn(424242, *inputs()[:2]),
                 lambda: torch.ops.winnow.indexer_topk_out(
                     424242, *inputs()[:2], out=torch.empty(T, K, dtype=torch.int32))):
        with pytest.raises(RuntimeError, match="^winnow: no open TopkPlan with id 424242 "
                                               r"\(closed plans are forgotten\)$"):
            call()


@needs_ext
def test_a_cpu_tensor_is_refused_with_the_c_message(plan):
    q, k, w, s, ks, ke = inputs()
    with pytest.raises(RuntimeError, match=f"^WINNOW_STATUS_INVALID_ARGUMENT: {CPU_REFUSED}$"):
        torch.ops.winnow.indexer_topk(plan.id, q, k, w, s, ks, ke)
    with pytest.raises(RuntimeError, match=f"^WINNOW_STATUS_INVALID_ARGUMENT: {CPU_REFUSED}$"):
        torch.ops.winnow.indexer_topk_out(plan.id, q, k, w, s, ks, ke,
                                          out=torch.empty(T, K, dtype=torch.int32))
    with pytest.raises(winnow.InvalidArgument, match=f"^{CPU_REFUSED}$"):
        winnow.indexer_topk(plan, q, k, w, s, ks, ke)


@needs_ext
def test_validation_errors_carry_the_c_message(plan):
    q, k, w, s, ks, ke = inputs(q_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_INVALID_ARGUMENT: q: dtype is bf16, "
                                           "expected fp8_e4m3$"):
        torch.ops.winnow.indexer_topk(plan.id, q, k, w, s, ks, ke)
    q, k, w, s, ks, ke = inputs()
    with pytest.raises(winnow.InvalidArgument, match="^k: torch dtype torch.int64 has no winnow "
                                                     "dtype"):
        winnow.indexer_topk(plan, q, k.to(torch.int64), w, s, ks, ke)
    with pytest.raises(winnow.InvalidArgument, match="^q: 5 dims, at most 4$"):
        winnow.indexer_topk(plan, q.view(T, H, 2, 4, 16), k, w, s, ks, ke)
    knn_plan = plan.context.topk_plan(arch="sm_90a", score="ip", heads=1, head_dim=64,
                                      q_dtype="fp16", k_dtype="fp16", key_scale=False, k=8,
                                      build=False)
    qi, ki = torch.zeros(4, 64, dtype=torch.float16), torch.zeros(100, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=f"^WINNOW_STATUS_INVALID_ARGUMENT: {CPU_REFUSED}$"):
        torch.ops.winnow.knn(knn_plan.id, qi, ki)
    with pytest.raises(winnow.InvalidArgument, match=f"^{CPU_REFUSED}$"):
        winnow.knn(knn_plan, qi, ki)
    knn_plan.close()


@needs_ext
def test_the_knn_kernel_takes_key_norms(ctx):
    knn_plan = ctx.topk_plan(arch="sm_90a", score="l2", heads=1, head_dim=64, q_dtype="fp16",
                             k_dtype="fp16", key_scale=False, k=8, build=False)
    qi, ki = torch.zeros(4, 64, dtype=torch.float16), torch.zeros(100, 64, dtype=torch.float16)
    norms = torch.ones(100)
    with pytest.raises(RuntimeError, match=f"^WINNOW_STATUS_INVALID_ARGUMENT: {CPU_REFUSED}$"):
        torch.ops.winnow.knn(knn_plan.id, qi, ki, norms)
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_INVALID_ARGUMENT: key_norms: torch "
                                           "dtype torch.float64 has no winnow dtype"):
        torch.ops.winnow.knn(knn_plan.id, qi, ki, norms.double())
    with pytest.raises(winnow.InvalidArgument, match="^key_norms: torch dtype torch.float64"):
        winnow.knn(knn_plan, qi, ki, norms.double())
    knn_plan.close()


@needs_ext
def test_concurrent_calls_and_plan_changes(ctx, plan):
    """Threads calling the ops (refused in C: CPU tensors) while others open and close plans:
    each call sees either its plan or a clear error, never a freed handle."""
    q, k, w, s, ks, ke = inputs()
    failures = []

    def call():
        for _ in range(200):
            try:
                torch.ops.winnow.indexer_topk(plan.id, q, k, w, s, ks, ke)
            except RuntimeError as e:
                if CPU_REFUSED not in str(e):
                    failures.append(str(e))

    def churn():
        for _ in range(50):
            p = ctx.topk_plan(arch="sm_90a", heads=H, k=K, build=False)
            try:
                torch.ops.winnow.indexer_topk(p.id, q, k, w, s, ks, ke)
            except RuntimeError as e:
                if "WINNOW_STATUS_NOT_BUILT" not in str(e) and CPU_REFUSED not in str(e):
                    failures.append(str(e))
            p.close()

    threads = [threading.Thread(target=f) for f in (call, call, churn, churn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---- [gpu]: the C++ path against the ctypes path ----
@pytest.fixture(scope="module")
def exact():
    return [t.cuda() for t in data.indexer_inputs(64, 64, 4096, seed=21)]


def op_order(t):
    q, k, scale, w, ks, ke = t
    return q, k, w, scale, ks, ke


@needs_ext
@pytest.mark.gpu
def test_indexer_topk_equals_the_ctypes_path(ctx, exact):
    plan = ctx.topk_plan(heads=64, k=2048, window="ranges")
    args = op_order(exact)
    fast = torch.ops.winnow.indexer_topk(plan.id, *args)
    slow = ops._indexer_topk(plan.id, *args)
    assert torch.equal(fast, slow)
    buffer = torch.full((80, 2048 + 8), -7, dtype=torch.int32, device="cuda")
    torch.ops.winnow.indexer_topk_out(plan.id, *args, out=buffer[:64, :2048])
    assert torch.equal(buffer[:64, :2048], slow)
    assert bool((buffer[64:] == -7).all()) and bool((buffer[:, 2048:] == -7).all())
    hint = slow[-1, :256].sort().values.contiguous()
    assert torch.equal(torch.ops.winnow.indexer_topk(plan.id, *args, hint),
                       ops._indexer_topk(plan.id, *args, hint))


@needs_ext
@pytest.mark.gpu
def test_the_current_stream_takes_the_launch(ctx, exact):
    plan = ctx.topk_plan(heads=64, k=2048, window="ranges")
    args = op_order(exact)
    want = ops._indexer_topk(plan.id, *args)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = torch.ops.winnow.indexer_topk(plan.id, *args)
    side.synchronize()
    assert torch.equal(got, want)


@needs_ext
@pytest.mark.gpu
def test_knn_equals_the_ctypes_path(ctx):
    q, k = data.small_int_corpus(4, "cuda")
    plan = ctx.topk_plan(score="ip", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True)
    idx, scores = torch.ops.winnow.knn(plan.id, q, k)
    want_idx, want_scores = ops._knn(plan.id, q, k)
    assert torch.equal(idx, want_idx) and torch.equal(scores, want_scores)
    want = reference.topk_rows(reference.inner_product_scores(q.cpu(), k.cpu()), 100,
                               sorted=True)
    assert torch.equal(idx.cpu(), want)


@needs_ext
@pytest.mark.gpu
def test_knn_with_key_norms_equals_the_ctypes_path(ctx):
    q, k = data.small_int_corpus(6, "cuda")
    norms = 2 * k.float().square().sum(1)  # not the keys' own: the kernel must read them
    plan = ctx.topk_plan(score="l2", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                         key_scale=False, k=100, sorted=True)
    idx, scores = torch.ops.winnow.knn(plan.id, q, k, norms)
    want_idx, want_scores = ops._knn(plan.id, q, k, norms)
    assert torch.equal(idx, want_idx) and torch.equal(scores, want_scores)
    assert not torch.equal(idx, torch.ops.winnow.knn(plan.id, q, k)[0])
    ip = ctx.topk_plan(score="ip", heads=1, head_dim=64, q_dtype="fp16", k_dtype="fp16",
                       key_scale=False, k=100)
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_INVALID_ARGUMENT: key_norms given, "
                                           "but the score program does not read ksq"):
        torch.ops.winnow.knn(ip.id, q, k, norms)


@needs_ext
@pytest.mark.gpu
def test_validation_errors_on_the_gpu(ctx, exact):
    plan = ctx.topk_plan(heads=64, k=2048, window="ranges")
    q, k, w, scale, ks, ke = op_order(exact)
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_INVALID_ARGUMENT: key_scale missing"):
        torch.ops.winnow.indexer_topk(plan.id, q, k, w, None, ks, ke)
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_INVALID_ARGUMENT: out_indices: shape"):
        torch.ops.winnow.indexer_topk_out(plan.id, q, k, w, scale, ks, ke,
                                          out=torch.empty(64, 100, dtype=torch.int32,
                                                          device="cuda"))
    small = winnow.TopkPlan(ctx, heads=64, k=2048, window="ranges",
                            workspace=torch.empty(256, dtype=torch.uint8, device="cuda"))
    with pytest.raises(RuntimeError, match="^WINNOW_STATUS_WORKSPACE_TOO_SMALL: .*smaller than"):
        torch.ops.winnow.indexer_topk(small.id, q, k, w, scale, ks, ke)
    small.set_workspace()  # a workspace of the right size, registered again
    assert torch.equal(torch.ops.winnow.indexer_topk(small.id, q, k, w, scale, ks, ke),
                       ops._indexer_topk(plan.id, q, k, w, scale, ks, ke))
