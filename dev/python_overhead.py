"""Host time of one winnow op call from Python, and its parts, as JSON:
  python3 dev/python_overhead.py out.json [--calls 1000]
"path" says which implementation torch.ops.winnow.* took: "c++" (the torch extension
libwinnow_torch.so, winnow.fast_ops_loaded()) or "ctypes" (the Python implementations).
With the extension loaded both are measured in the same run: "paths_us" holds, per path,
indexer_topk_out and indexer_topk, the ctypes path through ops with the same schemas in a
probe namespace whose CUDA kernels are the package's Python implementations (what
torch.ops.winnow.* runs without the extension); the top-level *_us keys are the active path's.
With a GPU: torch.ops.winnow.indexer_topk_out and indexer_topk on a small DSA-shaped
problem (8 rows, 64 heads, 4096 keys, k = 2048, ranges window), the mean host time of a call
in batches of 100 calls without synchronising (the GPU queue drained before each batch, so
it never fills: the host never waits for the kernels), the best batch, --calls in all, and
the device time per call; then the parts anywhere: torch dispatch
of a no-op op with the same schema, packing the 9 winnowTensor_t, the stream lookup, and a
ctypes call of a C function (winnowGetVersion)."""
import argparse
import json
import platform
import sys
import time

import torch

import winnow
from winnow import _capi, _device, ops

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--calls", type=int, default=1000)
args = parser.parse_args()


def per_call_us(fn, calls):
    """Host microseconds per call: the best batch of BATCH calls, the GPU queue drained before
    each batch. A batch stays far below the launch queue's depth (about a thousand entries;
    a call queues a memset and a launch), so the host never waits for the GPU inside it: a
    longer loop would time the kernels once the queue is full (71 us measured so)."""
    fn()  # warm
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    batch = min(calls, BATCH)
    best = float("inf")
    for _ in range(max(5, calls // batch)):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        best = min(best, (time.perf_counter() - start) / batch * 1e6)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return best


def gpu_us_per_call(fn, calls):
    """Device microseconds per call (CUDA events around a batch): what a longer loop waits for."""
    if not torch.cuda.is_available():
        return None
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


BATCH = 100
gpu = torch.cuda.is_available()
device = "cuda" if gpu else "cpu"
T, H, N, K = 8, 64, 4096, 2048
q = torch.zeros(T, H, 128, device=device).to(torch.float8_e4m3fn)
k = torch.zeros(N, 128, device=device).to(torch.float8_e4m3fn)
w = torch.ones(T, H, device=device)
scale = torch.ones(N, device=device)
ks = torch.zeros(T, dtype=torch.int32, device=device)
ke = torch.full((T,), N, dtype=torch.int32, device=device)
out = torch.empty(T, K, dtype=torch.int32, device=device)

ctx = winnow.Context()
plan = ctx.topk_plan(heads=H, k=K, window="ranges", arch=None if gpu else "sm_90a")
path = "c++" if winnow.fast_ops_loaded() else "ctypes"
record = {"python": platform.python_version(), "torch": torch.__version__,
          "winnow": winnow.__version__, "gpu": torch.cuda.get_device_name() if gpu else None,
          "calls": args.calls, "shape": {"T": T, "H": H, "N": N, "k": K}, "path": path,
          "fast_ops_status": winnow.fast_ops_status()}

# The parts.
noop = torch.library.Library("winnow_overhead_probe", "DEF")
noop.define("probe(int plan, Tensor q, Tensor k, Tensor? weights=None, Tensor? key_scale=None, "
            "Tensor? window_start=None, Tensor? window_end=None, Tensor? sample_hint=None, *, "
            "Tensor(a!) out) -> ()")
noop.impl("probe", lambda *a, **kw: None, "CUDA" if gpu else "CPU")
probe = torch.ops.winnow_overhead_probe.probe
# The ctypes path beside the extension: the winnow schemas with the Python implementations.
noop.define(ops._SCHEMAS["indexer_topk_out"].replace("indexer_topk_out(", "ctypes_topk_out(", 1))
noop.define(ops._SCHEMAS["indexer_topk"].replace("indexer_topk(", "ctypes_topk(", 1))
noop.impl("ctypes_topk_out", ops._indexer_topk_out, "CUDA")
noop.impl("ctypes_topk", ops._indexer_topk, "CUDA")
parts = {
    "torch_dispatch_noop_op": per_call_us(
        lambda: probe(plan.id, q, k, w, scale, ks, ke, None, out=out), args.calls),
    "pack_9_tensors": per_call_us(
        lambda: plan._fill(q, k, w, scale, ks, ke, None, out, None), args.calls),
    "current_stream": per_call_us(lambda: _device.current_stream(0), args.calls),
    "ctypes_call": per_call_us(_capi.lib.winnowGetVersion, args.calls),
}
record["parts_us"] = parts
if gpu:
    paths = {path: {
        "indexer_topk_out_us": per_call_us(
            lambda: torch.ops.winnow.indexer_topk_out(plan.id, q, k, w, scale, ks, ke, out=out),
            args.calls),
        "indexer_topk_out_default_us": per_call_us(  # the OpOverload: no overload lookup
            lambda: torch.ops.winnow.indexer_topk_out.default(plan.id, q, k, w, scale, ks, ke,
                                                              out=out), args.calls),
        "indexer_topk_us": per_call_us(
            lambda: torch.ops.winnow.indexer_topk(plan.id, q, k, w, scale, ks, ke), args.calls),
        "winnow_indexer_topk_out_us": per_call_us(  # the Python wrapper, out=
            lambda: winnow.indexer_topk(plan, q, k, w, scale, ks, ke, out=out), args.calls),
    }}
    if path == "c++":
        probe_out = torch.ops.winnow_overhead_probe.ctypes_topk_out
        probe_topk = torch.ops.winnow_overhead_probe.ctypes_topk
        paths["ctypes"] = {
            "indexer_topk_out_us": per_call_us(
                lambda: probe_out(plan.id, q, k, w, scale, ks, ke, out=out), args.calls),
            "indexer_topk_us": per_call_us(
                lambda: probe_topk(plan.id, q, k, w, scale, ks, ke), args.calls),
        }
        check = torch.full_like(out, -9)
        probe_out(plan.id, q, k, w, scale, ks, ke, out=check)
        torch.ops.winnow.indexer_topk_out(plan.id, q, k, w, scale, ks, ke, out=out)
        record["paths_equal"] = bool(torch.equal(check, out))
    record["paths_us"] = paths
    record["indexer_topk_out_us"] = paths[path]["indexer_topk_out_us"]
    record["indexer_topk_us"] = paths[path]["indexer_topk_us"]
    record["plan_execute_us"] = per_call_us(
        lambda: plan.execute(q, k, w, scale, ks, ke, out=out), args.calls)
    record["gpu_us_per_call"] = gpu_us_per_call(
        lambda: torch.ops.winnow.indexer_topk_out(plan.id, q, k, w, scale, ks, ke, out=out), 200)
    record["batch_calls"] = BATCH
    record["limit_us"] = 15.0
    record["within_limit"] = record["indexer_topk_out_us"] <= 15.0
json.dump(record, open(args.out, "w"), indent=1)
print(json.dumps(record, indent=1))
sys.exit(0)
