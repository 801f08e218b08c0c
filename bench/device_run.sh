#!/usr/bin/env bash
# One visit to the lent GPU: the [gpu] tests, the demo, the ceilings (PyTorch) and the
# benchmark, every output under $OUT. Binaries built on the CPU machine are carried in
# .devbin/. Env: TESTS (Catch2 filter, "-" to skip), DEMO_ARGS ("-" to skip), BENCH,
# TORCH_TOPK, TORCH_KNN, BENCH_VARIANT, NCU (a demo argument list to profile with ncu),
# VARIANT_RUNS, TEST_EACH, CASE_TIMEOUT.
set -o pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_CACHE_DIR=/tmp/winnow-cache
BIN=${BIN:-.devbin}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# TEST_EACH=1: every case matching TESTS (';'-separated Catch2 specs that must all match,
# e.g. "[gpu];~block*"; a comma inside one is "or") in its own process under CASE_TIMEOUT seconds, so a hang costs one
# case; no new case starts after TEST_TIMEOUT seconds in all.
if [ "${TESTS:-}" != "-" ] && [ -n "${TEST_EACH:-}" ]; then
  start=$SECONDS
  IFS=';' read -ra specs <<< "${TESTS:-[gpu]}"
  "$BIN/winnow_tests" --list-test-names-only "${specs[@]}" | grep . | while IFS= read -r name; do
    if (( SECONDS - start > ${TEST_TIMEOUT:-300} )); then echo "NOT RUN (time): $name"; continue; fi
    spec="${name%%,*}"; [ "$spec" != "$name" ] && spec="$spec*"
    timeout ${CASE_TIMEOUT:-90} "$BIN/winnow_tests" "$spec" -r console --durations yes > "$OUT/case.txt" 2>&1
    rc=$?; cat "$OUT/case.txt" >> "$OUT/gpu_tests.txt"
    echo "rc=$rc $(grep -E "All tests passed|test cases:|No test cases" "$OUT/case.txt" | tail -n 1) :: $name"
  done | tee "$OUT/gpu_tests_summary.txt"
  rm -f "$OUT/case.txt"
elif [ "${TESTS:-}" != "-" ]; then
  timeout ${TEST_TIMEOUT:-300} "$BIN/winnow_tests" "${TESTS:-[gpu]}" -r console --durations yes 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -n 8
fi
[ "${DEMO_ARGS:-}" != "-" ] && timeout ${DEMO_TIMEOUT:-200} "$BIN/winnow" demo ${DEMO_ARGS:---rows 2048 --keys 65536} \
  --json "$OUT/demo.jsonl" 2>&1 | tee "$OUT/demo.txt" | tail -n 9
# Resource usage and instruction mix of the kernels compiled so far (cache cubins).
for f in $(find "$WINNOW_CACHE_DIR" -name '*.cubin' 2>/dev/null | head -n 8); do
  echo "== $f"
  cuobjdump --dump-resource-usage "$f" 2>&1 | grep -E "Function|REG|STACK" | head -n 4
  cuobjdump --dump-sass "$f" 2>/dev/null | grep -oE "(HGMMA|QGMMA|HMMA|LDL|STL|BAR\.SYNC|SHFL)[A-Z0-9.]*" \
    | sort | uniq -c | sort -rn | head -n 12
done >> "$OUT/demo.txt" 2>&1
if [ -n "${BENCH:-}" ]; then
  timeout 120 python3 bench/ceilings.py "$OUT/ceilings.json" 2>&1 | tail -n 3
  # TORCH_TOPK="RxTxK,..." / TORCH_KNN="BxNxDxK,...": the PyTorch baselines, same visit.
  if [ -n "${TORCH_TOPK:-}${TORCH_KNN:-}" ]; then
    timeout ${TORCH_TIMEOUT:-240} python3 bench/torch_baselines.py "$OUT/baselines.json" \
      ${TORCH_TOPK:+--topk "$TORCH_TOPK"} ${TORCH_KNN:+--knn "$TORCH_KNN"} 2>&1 | tail -n 12
  fi
  # block-select compares with dense torch SDPA: timed first, read back with --dense.
  if [[ "$BENCH" == *block-select* ]]; then
    timeout ${SDPA_TIMEOUT:-300} python3 bench/sdpa_dense.py "$OUT/sdpa.jsonl" \
      ${SDPA_L:-4K 16K 64K 128K 256K} 2>&1 | tail -n 6
  fi
  # BENCH: ';'-separated "workload args" runs, e.g. "dsa-prefill --T 64K,1M;dsa-glm --T 64K"
  # or "block-select --L 4K,16K,64K;block-select --L 128K;block-select --L 256K --repeats 5"
  IFS=';' read -ra runs <<< "$BENCH"
  for r in "${runs[@]}"; do
    extra=(--baselines "$OUT/baselines.json")
    [[ "$r" == block-select* ]] && extra=(--dense "$OUT/sdpa.jsonl")
    timeout ${BENCH_TIMEOUT:-300} "$BIN/winnow" bench $r --ceilings "$OUT/ceilings.json" \
      "${extra[@]}" --out "$OUT/bench.jsonl" 2>>"$OUT/bench.txt" >/dev/null
    echo "bench $r: rc=$?"
    # BENCH_VARIANT="-DNAME=1 ...": the same run again with these NVRTC options (a kernel
    # variant, compiled under its own cache key), records in bench_variant.jsonl.
    # VARIANT_RUNS: a pattern of the runs that get the variant too (default: every one).
    if [ -n "${BENCH_VARIANT:-}" ] && [[ "$r" != block-select* ]] && [[ "$r" == ${VARIANT_RUNS:-*} ]]; then
      WINNOW_NVRTC_OPTIONS="$BENCH_VARIANT" timeout ${BENCH_TIMEOUT:-300} "$BIN/winnow" bench $r \
        --ceilings "$OUT/ceilings.json" "${extra[@]}" --out "$OUT/bench_variant.jsonl" \
        2>>"$OUT/bench.txt" >/dev/null
      echo "bench $r with $BENCH_VARIANT: rc=$?"
    fi
  done
  tail -n 40 "$OUT/bench.txt"
fi
if [ -n "${NCU:-}" ]; then
  # Hardware counters of the fused kernel (Firecracker machines): stalls, pipes, occupancy.
  timeout ${NCU_TIMEOUT:-240} ncu --clock-control none -k regex:winnow_topk -c 1 --set full \
    --import-source no -o "$OUT/profile" "$BIN/winnow" demo $NCU >/dev/null 2>&1
  ncu --import "$OUT/profile.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
  ncu --import "$OUT/profile.ncu-rep" --page source --print-source sass --csv \
    > "$OUT/ncu_sass.csv" 2>&1
  grep -E "Duration|Throughput|Warp Cycles|Registers|Achieved Occupancy|Issued|Stall" \
    "$OUT/ncu_details.txt" | head -n 40
  tar -C "$OUT" -czf "$OUT/ncu.tar.gz" ncu_details.txt ncu_sass.csv && \
    rm -f "$OUT/ncu_details.txt" "$OUT/ncu_sass.csv" "$OUT/profile.ncu-rep"
fi
