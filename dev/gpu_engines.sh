#!/usr/bin/env bash
# One call on the GPU machine: the engines' pipeline (DeepGEMM's logits + FlashInfer's top-k,
# the kit of ../shared/anchors copied into .anchors/) and `winnow bench` beside it on the same
# GPU, every run of winnow given the engines' records (--anchors) and the ceilings measured
# in the same call. Carry [".gpu-kit", ".anchors"]; binaries from dev/pack_binaries.sh, and
# optionally .gpu-kit/bench-cache.tar.gz (a kernel cache filled on the CPU machine by
# `WINNOW_CACHE_DIR=/tmp/bench-cache winnow bench ... --compile-only`, tarred from /tmp).
#
#   OUT=$OUT bash dev/gpu_engines.sh
#   PARTS=dsa RUNS='dsa-prefill --T 64K' OUT=$OUT bash dev/gpu_engines.sh
#
# Env: PARTS (the engines' parts, default dsa,decode,knn), RUNS (';'-separated `winnow
# bench` argument lists), DECODE (`winnow bench dsa-decode` arguments, "-" skips), STEP_TIMEOUT,
# ENGINES / CEILINGS (files of an earlier call on the same machine, carried in .gpu-kit/:
# used instead of measuring again, so that a second call finishes the runs).
# Files under $OUT: gpu.txt, ceilings.json, engines.jsonl (+ .err), bench.jsonl, bench.txt
# (the tables and the ratios to the engines' records), summary.txt.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
bash dev/unpack_binaries.sh
export LD_LIBRARY_PATH=$PWD/.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
W=.gpu-kit/winnow
t0=$SECONDS
note() { echo "$* (at $((SECONDS - t0)) s)" | tee -a "$OUT/summary.txt"; }
[ -f .gpu-kit/bench-cache.tar.gz ] && tar -C /tmp -xzf .gpu-kit/bench-cache.tar.gz
export WINNOW_CACHE_DIR=/tmp/bench-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
T=${STEP_TIMEOUT:-300}

if [ -n "${CEILINGS:-}" ]; then cp "$CEILINGS" "$OUT/ceilings.json"; else
  timeout 120 python3 bench/ceilings.py "$OUT/ceilings.json" > "$OUT/ceilings.txt" 2>&1
  note "ceilings rc=$?: $(cat "$OUT/ceilings.json" 2>/dev/null)"
fi
if [ -n "${ENGINES:-}" ]; then cp "$ENGINES" "$OUT/engines.jsonl"; else
  PARTS=${PARTS:-dsa,decode,knn} timeout "$T" bash .anchors/run.sh .anchors > "$OUT/engines.jsonl" 2> "$OUT/engines.err"
  note "engines rc=$?: $(grep -c ms_median "$OUT/engines.jsonl") records"
fi

IFS=';' read -ra runs <<< "${RUNS:-dsa-prefill --T 64K,1M;dsa-glm --T 256K;knn-ip --T 1M,5M --k 128,8192}"
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086  # the run's words are separate arguments
  timeout "$T" "$W" bench $r --ceilings "$OUT/ceilings.json" --anchors "$OUT/engines.jsonl" \
    --out "$OUT/bench.jsonl" 2>> "$OUT/bench.txt" > /dev/null
  note "bench $r: rc=$?"
done
if [ "${DECODE:-}" != "-" ]; then
  # shellcheck disable=SC2086
  timeout "$T" "$W" bench dsa-decode ${DECODE:---B 64,128 --len 4K,64K} --ceilings "$OUT/ceilings.json" \
    --anchors "$OUT/engines.jsonl" --out "$OUT/bench.jsonl" 2>> "$OUT/bench.txt" > /dev/null
  note "bench dsa-decode: rc=$?"
fi
grep -A 40 "against the engines' records" "$OUT/bench.txt" | tail -n 60
