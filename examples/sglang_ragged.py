"""SGLang's ragged prefill indexer top-k through winnow, with SGLang not installed: the
requests' keys concatenated into one fp8 k [N, 128] (fp32 scale per key), each row's window
[ks, ke) in it; the result is each row's local index plus an offset (ks by default: an index
into the concatenated keys), -1 padded.

  python3 examples/sglang_ragged.py [--requests 4] [--length 4096]

Without a GPU it compiles the kernel for sm_90a and stops there."""
import argparse

import torch

from winnow.sglang import RaggedIndexer
from winnow.testing import data, reference

parser = argparse.ArgumentParser()
parser.add_argument("--requests", type=int, default=4)
parser.add_argument("--length", type=int, default=4096)
parser.add_argument("--heads", type=int, default=64)
args = parser.parse_args()
R, L, H = args.requests, args.length, args.heads

if not torch.cuda.is_available():
    RaggedIndexer(H, 2048, arch="sm_90a")
    print("no GPU: the indexer kernel compiled for sm_90a; nothing to run")
    raise SystemExit(0)

# The last 16 tokens of each request, each seeing its request's keys up to itself (causal).
rows_per_request = 16
q, _, _, weights, _, _ = data.indexer_inputs(R * rows_per_request, H, 1, seed=1, ranges=False)
_, k, k_scale, _, _, _ = data.indexer_inputs(1, H, R * L, seed=2, ranges=False)
ks = torch.arange(R).repeat_interleave(rows_per_request).to(torch.int32) * L
ke = ks + L - rows_per_request + torch.arange(rows_per_request).repeat(R).to(torch.int32) + 1

indexer = RaggedIndexer(H, 2048)
out = indexer(q.cuda(), k.cuda(), k_scale.cuda(), weights.cuda(), ks.cuda(), ke.cuda())
print(f"request 1, its first row: {out[rows_per_request, :8].tolist()} ... (keys of request 1 "
      f"start at {L})")
want = reference.sglang_ragged_topk(q, k, k_scale, weights, ks, ke)
print("against materialized logits + exact top-k:",
      "the same keys" if torch.equal(out.cpu(), want) else "DIFFERENT")
