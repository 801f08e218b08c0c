#!/usr/bin/env bash
# One call on the GPU machine: the [gpu] tests, the demo, the ceilings (PyTorch) and the
# benchmark, every output under $OUT. Binaries built on the CPU machine are carried in
# .gpu-kit/ (BIN overrides; dev/pack_binaries.sh's .xz files are unpacked here). Env: TESTS (Catch2 filter, "-" to skip), DEMO_ARGS ("-" to skip), BENCH,
# TORCH_TOPK, TORCH_KNN, TORCH_DECODE, BENCH_VARIANT, NCU (a demo argument list to profile with ncu),
# VARIANT_RUNS, TEST_EACH, CASE_TIMEOUT, TEST_TIMEOUT, ORDER_SEED, C_TEST, SANITIZE, PY_TESTS,
# TUNE.
#
# TUNE: ';'-separated `winnow tune` runs before the benchmark, e.g. "dsa-prefill --T 64K;
# dsa-glm --T 256K" (tune.txt): the plans land in the run's cache folder, where BENCH's
# runs find them and add "winnow-tuned" records beside "winnow".
#
# PY_TESTS=1: also the Python package's tests, overhead and examples (dev/gpu_python.sh,
# which needs .gpu-kit/libwinnow.so.0), after the C++ steps.
#
# Tests (the pass criterion): the whole TESTS suite (default "[gpu]") in ONE process, in
# the default order and then in a shuffled one (--order rand, the seed printed; ORDER_SEED
# replays it), then the C program test (C_TEST=- skips it). Outputs: gpu_tests.txt,
# gpu_tests_rand.txt, c_two_contexts.txt. TEST_EACH=1 instead runs one case per process
# (a debugging aid only: a case that passes alone can fail beside the others).
#
# SANITIZE=memcheck: compute-sanitizer memcheck over the whole TESTS suite in one process
# and over the C program, with WINNOW_TEST_SMALL=1 (the large cases shrink): memcheck.txt.
# SANITIZE_SHARDS=N: the memcheck suite split over N processes at once (memcheck-<i>.txt).
# SANITIZE=race: racecheck, then synccheck, over the kernel cases (RACE_TESTS, default
# every [gpu] case but the C API ones, which run the same kernels, and the llvm one; quote a
# name pattern after a tag: '[gpu]~[knn]~"C API*"', since '[gpu]~C API*~[knn]' matches 6
# cases), WINNOW_TEST_SMALL=1:
# racecheck.txt, synccheck.txt. SANITIZE=idioms: tests/sanitizer/racecheck_idioms.cu (copy it
# into $BIN) built with nvcc and run under racecheck per variant (IDIOMS, default 0..13):
# idioms.txt. All three skip the other steps unless asked for explicitly
# (DEMO_ARGS, BENCH, NCU). Every step prints its duration ("time: ...").
set -o pipefail
bash "$(dirname "$0")/unpack_binaries.sh"  # no-op unless dev/pack_binaries.sh compressed them
export LD_LIBRARY_PATH=${BIN:-.gpu-kit}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_TEST_TOOL=$(cd "${BIN:-.gpu-kit}" 2>/dev/null && pwd)/winnow  # the tool tests run the carried binary
export WINNOW_CACHE_DIR=/tmp/winnow-cache
BIN=${BIN:-.gpu-kit}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
run_start=$SECONDS
step_start=$SECONDS
# Prints how long the step since the last call took, and the run so far.
timing() {
  echo "time: $1 $((SECONDS - step_start)) s (run $((SECONDS - run_start)) s)"
  step_start=$SECONDS
}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
# One sanitizer tool over one Catch2 run: the report and the tests' output in $OUT/$1.txt.
sanitize() {
  local tool=$1 spec=$2 limit=$3
  shift 3
  WINNOW_TEST_SMALL=1 timeout "$limit" "$SANITIZER" --tool "$tool" --print-limit 200 "$@" \
    "$BIN/winnow_tests" "$spec" -r console --durations yes > "$OUT/$tool.txt" 2>&1
  echo "$tool rc=$? :: $spec"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases:|All tests passed" "$OUT/$tool.txt" | tail -n 3
  timing "$tool"
}
if [ "${SANITIZE:-}" = memcheck ]; then
  # The case that plants a cubin the driver refuses expects cuModuleLoadData's
  # CUDA_ERROR_INVALID_IMAGE (its point: evict and recompile): it runs on its own with API
  # errors unreported (memory errors still are), appended to memcheck.txt.
  refused='"a plan builds when its cached cubin is one the driver refuses"'
  if [ "${SANITIZE_SHARDS:-1}" -gt 1 ]; then
    # The suite's cases dealt round-robin to SANITIZE_SHARDS processes at once, each with
    # its own kernel cache (the compiles run side by side): memcheck-<i>.txt, and their
    # summaries in memcheck.txt. Every case of the suite runs once, in one of them.
    WINNOW_TEST_SMALL=1 "$BIN/winnow_tests" "${TESTS:-[gpu]}~$refused" --list-test-names-only |
      grep -v '^$' | sed 's/,/\\,/g' > "$OUT/memcheck-cases.txt"  # Catch2 splits specs on commas
    n=$SANITIZE_SHARDS
    for ((i = 0; i < n; ++i)); do
      awk -v n="$n" -v i="$i" 'NR % n == i' "$OUT/memcheck-cases.txt" > "/tmp/memcheck-shard-$i.txt"
      (WINNOW_CACHE_DIR=/tmp/winnow-cache-$i WINNOW_TEST_SMALL=1 timeout "${SANITIZE_TIMEOUT:-480}" \
         "$SANITIZER" --tool memcheck --print-limit 200 "$BIN/winnow_tests" \
         --input-file "/tmp/memcheck-shard-$i.txt" -r console --durations yes \
         > "$OUT/memcheck-$i.txt" 2>&1
       echo "memcheck shard $i of $n rc=$? :: $(wc -l < "/tmp/memcheck-shard-$i.txt") cases") &
    done
    wait
    for ((i = 0; i < n; ++i)); do
      { echo "== shard $i"; grep -E "ERROR SUMMARY|test cases:|All tests passed" "$OUT/memcheck-$i.txt" | tail -n 3; } \
        | tee -a "$OUT/memcheck.txt"
    done
    timing "memcheck, $n shards"
  else
    sanitize memcheck "${TESTS:-[gpu]}~$refused" "${SANITIZE_TIMEOUT:-480}"
  fi
  echo "== $refused under memcheck --report-api-errors no" >> "$OUT/memcheck.txt"
  WINNOW_TEST_SMALL=1 timeout 120 "$SANITIZER" --tool memcheck --report-api-errors no \
    "$BIN/winnow_tests" "$refused" >> "$OUT/memcheck.txt" 2>&1
  echo "memcheck, the refused-cubin case: rc=$?"; grep "ERROR SUMMARY" "$OUT/memcheck.txt" | tail -n 1
  if [ "${C_TEST:-}" != "-" ]; then
    echo "== C program under memcheck" >> "$OUT/memcheck.txt"
    timeout 120 "$SANITIZER" --tool memcheck "$BIN/winnow_c_two_contexts" >> "$OUT/memcheck.txt" 2>&1
    echo "memcheck C program rc=$?"; grep "ERROR SUMMARY" "$OUT/memcheck.txt" | tail -n 1
    timing "memcheck C program"
  fi
elif [ "${SANITIZE:-}" = race ]; then
  # racecheck: shared-memory hazards; synccheck: barriers under divergence.
  sanitize racecheck "${RACE_TESTS:-[gpu]~[llvm]~\"C API*\"}" "${RACE_TIMEOUT:-300}" --racecheck-report hazard
  sanitize synccheck "${RACE_TESTS:-[gpu]~[llvm]~\"C API*\"}" "${SYNC_TIMEOUT:-200}"
elif [ "${SANITIZE:-}" = idioms ]; then
  # tests/sanitizer/racecheck_idioms.cu (carried in $BIN): which synchronisation idiom makes
  # racecheck report hazards on barrier-ordered accesses. IDIOMS: the variants.
  nvcc -arch=sm_90a -lineinfo -o "$OUT/racecheck_idioms" "$BIN/racecheck_idioms.cu" -lcuda \
    > "$OUT/idioms.txt" 2>&1
  for v in ${IDIOMS:-$(seq 0 13)}; do
    echo "== variant $v" >> "$OUT/idioms.txt"
    timeout 60 "$SANITIZER" --tool racecheck --racecheck-report hazard "$OUT/racecheck_idioms" "$v" \
      >> "$OUT/idioms.txt" 2>&1
    echo "variant $v rc=$? $(grep "RACECHECK SUMMARY" "$OUT/idioms.txt" | tail -n 1)"
  done
  rm -f "$OUT/racecheck_idioms"
  timing "racecheck idioms"
elif [ -n "${SANITIZE:-}" ]; then
  echo "SANITIZE=$SANITIZE: expected memcheck, race or idioms"
fi
if [ -n "${SANITIZE:-}" ]; then
  : "${DEMO_ARGS:=-}"
  run_tests=0  # TESTS was the sanitized suite
else
  run_tests=1
fi
# TEST_EACH=1: every case matching TESTS (';'-separated Catch2 specs that must all match,
# e.g. "[gpu];~block*"; a comma inside one is "or") in its own process under CASE_TIMEOUT seconds, so a hang costs one
# case; no new case starts after TEST_TIMEOUT seconds in all.
if [ $run_tests = 1 ] && [ "${TESTS:-}" != "-" ] && [ -n "${TEST_EACH:-}" ]; then
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
  timing "tests, one case per process"
elif [ $run_tests = 1 ] && [ "${TESTS:-}" != "-" ]; then
  timeout ${TEST_TIMEOUT:-270} "$BIN/winnow_tests" "${TESTS:-[gpu]}" -r console --durations yes 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -n 8
  echo "one process, default order: rc=$?"
  timing "tests, one process, default order"
  seed=${ORDER_SEED:-$(( (RANDOM << 15 | RANDOM) + 1 ))}
  echo "one process, --order rand --rng-seed $seed" | tee "$OUT/gpu_tests_rand.txt"
  timeout ${TEST_TIMEOUT:-270} "$BIN/winnow_tests" "${TESTS:-[gpu]}" --order rand --rng-seed "$seed" \
    -r console --durations yes 2>&1 | tee -a "$OUT/gpu_tests_rand.txt" | tail -n 8
  echo "one process, --order rand --rng-seed $seed: rc=$?"
  timing "tests, one process, random order"
fi
if [ $run_tests = 1 ] && [ "${C_TEST:-}" != "-" ]; then
  # No PyTorch and no test framework in the process: nothing else retains the context.
  timeout 180 "$BIN/winnow_c_two_contexts" > "$OUT/c_two_contexts.txt" 2>&1
  echo "C program (two contexts): rc=$? (77: skipped)"; tail -n 5 "$OUT/c_two_contexts.txt"
  timing "C program"
fi
[ "${DEMO_ARGS:-}" != "-" ] && timeout ${DEMO_TIMEOUT:-200} "$BIN/winnow" demo ${DEMO_ARGS:---rows 2048 --keys 65536} \
  --json "$OUT/demo.jsonl" 2>&1 | tee "$OUT/demo.txt" | tail -n 9 && timing demo
# Resource usage and instruction mix of the kernels compiled so far (cache cubins).
for f in $(find "$WINNOW_CACHE_DIR" -name '*.cubin' 2>/dev/null | head -n 8); do
  echo "== $f"
  cuobjdump --dump-resource-usage "$f" 2>&1 | grep -E "Function|REG|STACK" | head -n 4
  cuobjdump --dump-sass "$f" 2>/dev/null | grep -oE "(HGMMA|QGMMA|HMMA|LDL|STL|BAR\.SYNC|SHFL)[A-Z0-9.]*" \
    | sort | uniq -c | sort -rn | head -n 12
done >> "$OUT/demo.txt" 2>&1
if [ -n "${TUNE:-}" ]; then
  IFS=';' read -ra tunes <<< "$TUNE"
  for t in "${tunes[@]}"; do
    timeout ${TUNE_TIMEOUT:-300} "$BIN/winnow" tune $t >> "$OUT/tune.txt" 2>&1
    echo "tune $t: rc=$?"
    timing "tune $t"
  done
  "$BIN/winnow" tune --show >> "$OUT/tune.txt" 2>&1
  tail -n 30 "$OUT/tune.txt"
fi
if [ -n "${BENCH:-}" ]; then
  timeout 120 python3 bench/ceilings.py "$OUT/ceilings.json" 2>&1 | tail -n 3
  # TORCH_TOPK="RxTxK,..." / TORCH_KNN="BxNxDxK,..." / TORCH_DECODE="LENS:NEXT_N:K,...":
  # the PyTorch baselines, same run.
  if [ -n "${TORCH_TOPK:-}${TORCH_KNN:-}${TORCH_DECODE:-}" ]; then
    timeout ${TORCH_TIMEOUT:-240} python3 bench/torch_baselines.py "$OUT/baselines.json" \
      ${TORCH_TOPK:+--topk "$TORCH_TOPK"} ${TORCH_KNN:+--knn "$TORCH_KNN"} \
      ${TORCH_DECODE:+--decode "$TORCH_DECODE"} 2>&1 | tail -n 12
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
    # variant, compiled under its own cache key), records in bench_variant.jsonl (each
    # record names its variant); several variants separated by '|' run one after another.
    # VARIANT_RUNS: a pattern of the runs that get the variant too (default: every one).
    # The variant "pipeline" sets WINNOW_TOPK_PIPELINE=1 instead (the pipelined plan).
    if [ -n "${BENCH_VARIANT:-}" ] && [[ "$r" != block-select* ]] && [[ "$r" == ${VARIANT_RUNS:-*} ]]; then
      IFS='|' read -ra variants <<< "$BENCH_VARIANT"
      for v in "${variants[@]}"; do
        # "pipeline": the pipelined plan (WINNOW_TOPK_PIPELINE=1) instead of NVRTC options.
        pipe=
        if [ "$v" = pipeline ]; then pipe=1; v=; fi
        WINNOW_TOPK_PIPELINE="$pipe" WINNOW_NVRTC_OPTIONS="$v" timeout ${BENCH_TIMEOUT:-300} "$BIN/winnow" bench $r \
          --ceilings "$OUT/ceilings.json" "${extra[@]}" --out "$OUT/bench_variant.jsonl" \
          2>>"$OUT/bench.txt" >/dev/null
        echo "bench $r with $v: rc=$?"
      done
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
  # The stall reasons (cycles per issued instruction, by reason), largest first.
  ncu --import "$OUT/profile.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
names, units, vals = rows[0], rows[1], rows[2]
st = [(float(v.replace(",", "")), n) for n, v in zip(names, vals)
      if "issue_stalled" in n and n.endswith("_per_issue_active.ratio")]
for v, n in sorted(st, reverse=True)[:14]:
    print("%8.3f  %s" % (v, n))' > "$OUT/ncu_stalls.txt" 2>&1
  cat "$OUT/ncu_stalls.txt"
  grep -E "Duration|Throughput|Warp Cycles|Registers|Achieved Occupancy|Issued|Stall" \
    "$OUT/ncu_details.txt" | head -n 40
  tar -C "$OUT" -czf "$OUT/ncu.tar.gz" ncu_details.txt ncu_sass.csv && \
    rm -f "$OUT/ncu_details.txt" "$OUT/ncu_sass.csv" "$OUT/profile.ncu-rep"
fi
timing "the rest"
if [ -n "${PY_TESTS:-}" ]; then
  OUT="$OUT" bash dev/gpu_python.sh
  echo "python (dev/gpu_python.sh): rc=$?"
  timing python
fi
