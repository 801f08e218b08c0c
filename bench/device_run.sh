#!/usr/bin/env bash
# One visit to the lent GPU: the [gpu] tests, the demo, the ceilings (PyTorch) and the
# benchmark, every output under $OUT (at most 8 files come back). Binaries built on the
# CPU machine are carried in .devbin/.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_CACHE_DIR=/tmp/winnow-cache
BIN=${BIN:-.devbin}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout ${TEST_TIMEOUT:-300} "$BIN/winnow_tests" "${TESTS:-[gpu]}" -r console --durations yes 2>&1 \
  | tee "$OUT/gpu_tests.txt" | tail -n 8
timeout ${DEMO_TIMEOUT:-200} "$BIN/winnow" demo ${DEMO_ARGS:---rows 2048 --keys 65536} \
  --json "$OUT/demo.jsonl" 2>&1 | tee "$OUT/demo.txt" | tail -n 9
if [ -n "${BENCH:-}" ]; then
  timeout 120 python3 bench/ceilings.py "$OUT/ceilings.json" 2>&1 | tail -n 3
  # block-select compares with dense torch SDPA: timed first, read back with --dense.
  if [[ "$BENCH" == *block-select* ]]; then
    timeout ${SDPA_TIMEOUT:-300} python3 bench/sdpa_dense.py "$OUT/sdpa.jsonl" \
      ${SDPA_L:-4K 16K 64K 128K 256K} 2>&1 | tail -n 6
  fi
  # BENCH: ';'-separated "workload args" runs, e.g. "dsa-prefill --T 64K,1M;dsa-glm --T 64K"
  # or "block-select --L 4K,16K,64K;block-select --L 128K;block-select --L 256K --repeats 5"
  IFS=';' read -ra runs <<< "$BENCH"
  for r in "${runs[@]}"; do
    extra=()
    [[ "$r" == block-select* ]] && extra=(--dense "$OUT/sdpa.jsonl")
    timeout ${BENCH_TIMEOUT:-300} "$BIN/winnow" bench $r --ceilings "$OUT/ceilings.json" \
      "${extra[@]}" --out "$OUT/bench.jsonl" 2>>"$OUT/bench.txt" >/dev/null
    echo "bench $r: rc=$?"
  done
  tail -n 40 "$OUT/bench.txt"
fi
