#!/usr/bin/env bash
# A short GPU visit: the demo first (speed and exactness of the DSA shape in seconds),
# the kernels' resource usage and instruction mix from the cache's cubins, then the
# [gpu] tests and the bench lines of bench/device_run.sh. Same environment variables.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_CACHE_DIR=/tmp/winnow-cache
BIN=${BIN:-.devbin}
OUT=${OUT:-out}
mkdir -p "$OUT"
timeout ${DEMO_TIMEOUT:-120} "$BIN/winnow" demo ${DEMO_ARGS:---rows 2048 --keys 65536} \
  --json "$OUT/demo.jsonl" 2>&1 | tee "$OUT/demo.txt" | tail -n 9
{
  for f in $(find /tmp/winnow-cache -name '*.cubin' -o -name '*.bin' | head -n 8); do
    echo "== $f"
    cuobjdump --dump-resource-usage "$f" 2>&1 | grep -E "Function|REG|STACK" | head -n 4
    cuobjdump --dump-sass "$f" 2>/dev/null | grep -oE "(HGMMA|QGMMA|HMMA|IMMA|LDL|STL|BAR\.SYNC|SHFL)[A-Z0-9.]*" \
      | sort | uniq -c | sort -rn | head -n 12
  done
} >> "$OUT/demo.txt" 2>&1
tail -n 30 "$OUT/demo.txt"
TESTS=${TESTS:-[gpu]} DEMO_ARGS=- bash bench/device_run.sh
