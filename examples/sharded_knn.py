"""Exact k-nearest-neighbour search over keys sharded across GPUs (issue 19): each rank holds
a slice of the corpus, winnow.ShardedTopk searches it and merges the ranks' lists through
torch.distributed's NCCL all-gather; rank 0 checks the result equals one GPU's over all keys.

  torchrun --nproc-per-node 2 examples/sharded_knn.py [--rows 64] [--keys 65536] [--k 64]

Without a GPU it checks that the modules import and stops there."""
import argparse
import os

import torch
import torch.distributed as dist

import winnow

parser = argparse.ArgumentParser()
parser.add_argument("--rows", type=int, default=64)
parser.add_argument("--keys", type=int, default=65536)
parser.add_argument("--k", type=int, default=64)
args = parser.parse_args()

if not torch.cuda.is_available():
    print("no GPU: winnow.ShardedTopk imported; nothing to run (launch with torchrun on GPUs)")
    raise SystemExit(0)

rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
local = int(os.environ.get("LOCAL_RANK", 0))
if local >= torch.cuda.device_count():
    raise SystemExit(f"rank {rank}: {world} ranks need {world} GPUs, found "
                     f"{torch.cuda.device_count()}")
torch.cuda.set_device(local)
dist.init_process_group("nccl", rank=rank, world_size=world)

# The same corpus on every rank (same seed); each keeps its slice on its GPU.
g = torch.Generator().manual_seed(0)
q = torch.randint(-3, 4, (args.rows, 128), generator=g).half()
corpus = torch.randint(-3, 4, (args.keys, 128), generator=g).half()
bounds = [args.keys * r // world for r in range(world + 1)]
offset, count = bounds[rank], bounds[rank + 1] - bounds[rank]

ctx = winnow.Context(local)
fields = dict(score="ip", heads=1, q_dtype="fp16", k_dtype="fp16", key_scale=False, k=args.k,
              sorted=True)
search = winnow.ShardedTopk(ctx, key_offset=offset, shard_keys=count, total_keys=args.keys,
                            max_rows=args.rows, **fields)
indices, scores = search(q.cuda(), corpus[offset:offset + count].cuda())

if rank == 0:  # one GPU over every key
    one = ctx.topk_plan(**fields)
    want = torch.empty(args.rows, args.k, dtype=torch.int32, device="cuda")
    want_scores = torch.empty(args.rows, args.k, dtype=torch.float32, device="cuda")
    one.execute(q.cuda(), corpus.cuda(), out=want, out_scores=want_scores)
    same = torch.equal(indices, want) and torch.equal(scores, want_scores)
    print(f"{world} shards of {args.keys} keys, k = {args.k}: "
          f"{'equal to one GPU bit for bit' if same else 'DIFFERENT from one GPU'}")
    if not same:
        raise SystemExit(1)
dist.destroy_process_group()
