#!/usr/bin/env bash
# One visit to the lent GPU: the [gpu] tests, then the demo at two sizes, with every
# output under $OUT. Binaries built on the CPU machine are carried in .devbin/.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_CACHE_DIR=/tmp/winnow-cache
BIN=${BIN:-.devbin}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
timeout ${TEST_TIMEOUT:-300} "$BIN/winnow_tests" "${TESTS:-[gpu]}" -r console --durations yes 2>&1 \
  | tee "$OUT/gpu_tests.txt" | tail -n 60
timeout ${DEMO_TIMEOUT:-200} "$BIN/winnow" demo ${DEMO_ARGS:---rows 2048 --keys 65536} \
  --json "$OUT/demo.jsonl" 2>&1 | tee "$OUT/demo.txt"
if [ -n "${BIG_DEMO:-}" ]; then
  timeout 300 "$BIN/winnow" demo --rows 8192 --keys 65536 --k 2048 --repeats 5 \
    --json "$OUT/demo.jsonl" 2>&1 | tee -a "$OUT/demo.txt"
fi
