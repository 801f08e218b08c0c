"""vLLM's prefill indexer top-k through winnow, with neither vLLM nor DeepGEMM installed:
the tensors vLLM hands its indexer (fp8 q [T, H, 128], fp8 k [N, 128] with an fp32 scale per
key, fp32 weights [T, H], int32 ks / ke [T]) go in; int32 indices relative to ks, -1 padded,
come out in a caller's [T, 2048] buffer, as fp8_mqa_logits + top_k_per_row_prefill give them.

  python3 examples/vllm_prefill.py [--tokens 256] [--keys 16384]

Without a GPU it compiles the kernel for sm_90a and stops there."""
import argparse

import torch

from winnow import vllm
from winnow.indexer import PrefillIndexer
from winnow.testing import reference

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=256)
parser.add_argument("--keys", type=int, default=16384)
parser.add_argument("--heads", type=int, default=64)
args = parser.parse_args()
T, N, H = args.tokens, args.keys, args.heads

if not torch.cuda.is_available():
    PrefillIndexer(H, 2048, arch="sm_90a")
    print("no GPU: the indexer kernel compiled for sm_90a; nothing to run")
    raise SystemExit(0)

# A chunk of a packed prefill: row t of request r sees that request's keys up to its position.
g = torch.Generator().manual_seed(0)
q = torch.randn(T, H, 128, generator=g).to(torch.float8_e4m3fn).cuda()
k = torch.randn(N, 128, generator=g).to(torch.float8_e4m3fn).cuda()
k_scale = (torch.rand(N, generator=g) + 0.5).cuda()
weights = torch.randn(T, H, generator=g).cuda()
ks = torch.zeros(T, dtype=torch.int32)
ke = torch.linspace(N // 8, N, T).to(torch.int32)
ks[T // 2:] = N // 2  # a second request's keys start at N / 2
ke[T // 2:] = torch.maximum(ke[T // 2:], torch.tensor(N // 2 + 1, dtype=torch.int32))
ks, ke = ks.cuda(), ke.cuda()

topk_indices_buffer = torch.full((T, 2048), -1, dtype=torch.int32, device="cuda")
ok = vllm.fp8_mqa_topk_indices(q, (k, k_scale), weights, ks, ke, topk_indices_buffer)
print(f"fp8_mqa_topk_indices -> {ok}; row 0: {topk_indices_buffer[0, :8].tolist()} ...")

rows = slice(0, 8)  # the reference materializes [rows, N] float64 logits: a few rows
logits = reference.indexer_logits(q[rows].cpu(), k.cpu(), k_scale.cpu(), weights[rows].cpu())
magnitude = reference.indexer_logits(q[rows].cpu().float().abs(), k.cpu().float().abs(),
                                     k_scale.cpu(), weights[rows].cpu().abs())
problem = reference.selection_within(topk_indices_buffer[rows].cpu(), logits, 2048,
                                     ks[rows].cpu(), ke[rows].cpu(),
                                     tol=float(magnitude.max()) * 2.0 ** -14)
print("rows 0-7 against materialized logits + exact top-k:", problem or "the same keys")
