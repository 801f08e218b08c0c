#!/usr/bin/env python3
"""Calls DeepGEMM's fp8_mqa_logits on the dsa-prefill shape, for a profiler to catch.

    python3 dev/deepgemm_logits.py T [H] [CALLS]

Q = 8192 queries, d = 128, H heads (64), T keys, dense windows [0, T), fp8 q and keys with
per-key scales, the same inputs as the anchors kit's engines.py. One warm-up call (DeepGEMM
compiles its kernel on the first), then CALLS calls (1). Needs deep_gemm importable
(dev/gpu_profile_indexer.sh builds it through the anchors kit).
"""
import sys

import torch
import deep_gemm

T = int(sys.argv[1])
H = int(sys.argv[2]) if len(sys.argv) > 2 else 64
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 1
Q, d = 8192, 128
q = torch.randn(Q, H, d, device="cuda").to(torch.float8_e4m3fn)
kv = torch.randn(T, d, device="cuda").to(torch.float8_e4m3fn)
sc = torch.rand(T, device="cuda") * 0.5 + 0.5
w = torch.randn(Q, H, device="cuda")
ks = torch.zeros(Q, dtype=torch.int32, device="cuda")
ke = torch.full((Q,), T, dtype=torch.int32, device="cuda")
deep_gemm.fp8_mqa_logits(q, (kv, sc), w, ks, ke, clean_logits=False)
torch.cuda.synchronize()
for _ in range(calls):
    deep_gemm.fp8_mqa_logits(q, (kv, sc), w, ks, ke, clean_logits=False)
torch.cuda.synchronize()
print(f"deepgemm fp8_mqa_logits Q={Q} T={T} H={H}: {calls} call(s) done")
