#!/usr/bin/env bash
# A build checked on the GPU machine before it lands, one step per device call (each under
# the 600 s limit):
#
#   bash dev/gpu_compare.sh suites       # the whole [gpu] suite, one process, both orders
#   bash dev/gpu_compare.sh suites-llvm  # the [gpu] suite under the llvm backend
#   bash dev/gpu_compare.sh sanitize     # racecheck + memcheck on the cases in CASES
#   bash dev/gpu_compare.sh bench        # the base build against this one, one run each shape
#   bash dev/gpu_compare.sh llvm         # LLVM-built against NVRTC-built kernels, and
#                                        # NVRTC's first tier on this machine's cores
#
# Carry .gpu-kit (dev/pack_binaries.sh fills it on the CPU machine):
#   .gpu-kit/{winnow,winnow_tests,winnow_c_two_contexts,libwinnow.so.0}  this build
#   .gpu-kit/base/winnow                 the base build (BASE=<ref> there), for `bench`
#   .gpu-kit/libwinnow_llvm.so           the llvm backend, linked statically (WINNOW_LLVM_STATIC):
#                                        with it the llvm backend compiles on this machine
#   (the binaries as .xz, unpacked by dev/unpack_binaries.sh)
#   .gpu-kit/llvm-cache.tar.gz   a kernel cache filled by this build with
#                                WINNOW_BACKEND=llvm (bench --compile-only; step llvm)
# Everything goes under $OUT (a step's files tarred into $OUT/<step>.tar.gz: a device call
# returns few files).
set -o pipefail
step=${1:?usage: dev/gpu_compare.sh suites|suites-llvm|sanitize|bench|llvm}
bash "$(dirname "$0")/unpack_binaries.sh"  # the binaries travel xz-compressed
OUT=${OUT:-out}
O=$OUT/$step
mkdir -p "$O"
export LD_LIBRARY_PATH=.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_TEST_TOOL=$PWD/.gpu-kit/winnow  # the tool tests run the carried binary
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
note() { echo "$* (at $((SECONDS - t0)) s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/gpu.txt"
git log --oneline -1 > "$O/commit.txt" 2>/dev/null

# The cases whose kernels a change touches (Catch2 names, comma-separated), for memcheck in
# `sanitize`; the default names the paged stream path, every gather_best caller (knn, key
# splits, the shard merge), the top-k sample and the fused kernel's index-ordered rows.
CASES=${CASES:-'"paged decode stream path equals*","knn retrieval: ip*","knn retrieval: heavy ties*","knn retrieval: k = N*","key splits*","sharded relu_mh*","sharded knn*","sample hint of random*","a sample threshold above*","relu_mh fp8 with key scale*","heavy ties: few distinct*","range windows: empty*"'}

case "$step" in
suites)
  # The whole [gpu] suite in one process, default and shuffled order side by side, after a
  # prewarm of the kernel cache (8 cases at a time), and the C program
  # (dev/gpu_parallel.sh; its files in $OUT/run.tar.gz).
  # Every compile request of the prewarm and the suites is recorded (WINNOW_RECORD_COMPILES)
  # into $OUT/suites/records: `winnow cache replay` with --backend llvm on the CPU machine
  # fills the cache a later `suites-llvm` step runs the suite from.
  # With .gpu-kit/caches.tar.gz (an earlier run's $OUT/caches.tar.gz, the same build) the
  # kernels are cached: no prewarm, and both orders fit (229 s on an H100); from a cold
  # cache the prewarm takes 113-145 s and both orders ran past 380 s on an H100.
  mkdir -p "$O/records"
  prewarm=8; tt=380
  [ -f .gpu-kit/caches.tar.gz ] && { prewarm=; tt=460; }
  WINNOW_RECORD_COMPILES=$(cd "$O/records" && pwd) OUT=$OUT PREWARM=$prewarm TESTS='[gpu]' TT=${TT:-$tt} \
    bash dev/gpu_parallel.sh
  note "suites done"
  ;;
suites-llvm)
  # The [gpu] suite in one process under WINNOW_BACKEND=llvm from a cache filled on the
  # CPU machine (.gpu-kit/llvm-suite-cache.tar.gz: `winnow cache replay RECORDS --backend
  # llvm --dir /tmp/c-llvm-suite` over a `suites` step's records, then tar -C /tmp): the
  # cases' compiles would not fit one call. A kernel missing from the cache is compiled here
  # by .gpu-kit/libwinnow_llvm.so (static); without it, the case fails.
  # ORDERS="decl rand": both orders side by side (rand with a printed seed), each into its own
  # copy of the cache.
  mkdir -p /tmp/c-llvm-suite && tar -C /tmp -xzf .gpu-kit/llvm-suite-cache.tar.gz
  ls /tmp/c-llvm-suite/v1/sm_90a > "$O/prepared-keys.txt"
  # Every request is recorded (before its compile) into $O/records: a request missing from
  # the prepared cache is compiled here (or, without the module, fails its case), and its
  # record, replayed on the CPU machine, says which kernel it was.
  mkdir -p "$O/records"
  seed=$(( (RANDOM << 15) | RANDOM )); note "rand order seed $seed"
  for order in ${ORDERS:-decl}; do
    cache=/tmp/c-llvm-suite; [ $order != decl ] && { cache=/tmp/c-llvm-suite-$order; cp -r /tmp/c-llvm-suite $cache; }
    (WINNOW_RECORD_COMPILES=$(cd "$O/records" && pwd) WINNOW_BACKEND=llvm WINNOW_CACHE_DIR=$cache \
      WINNOW_TEST_CACHE_DIR=$cache \
      timeout ${TT:-540} .gpu-kit/winnow_tests "${LLVM_SPEC:-[gpu]}" --order $order --rng-seed $seed -r console --durations yes \
      > "$O/suite-llvm-$order.txt" 2>&1
     note "suite under llvm, $order order, rc=$? :: $(grep -E 'All tests passed|test cases:' "$O/suite-llvm-$order.txt" | tail -n 1)") &
  done
  wait
  # The records whose kernel the prepared cache lacked (the misses), by key.
  for r in "$O"/records/*.compile; do
    [ -e "$r" ] || continue
    k=$(basename "$r" .compile)
    grep -qx "$k" "$O/prepared-keys.txt" || echo "missing from the prepared cache: $k $(sed -n 3p "$r")"
  done | tee -a "$O/summary.txt"
  ;;
sanitize)
  # racecheck (hazards) and memcheck side by side, the large cases shrunk. RACE picks
  # racecheck's cases (default: the paged stream's; racecheck over every changed case does
  # not fit one call), memcheck takes CASES.
  export WINNOW_TEST_SMALL=1
  RACE=${RACE:-'"paged decode stream path*"'}
  (WINNOW_CACHE_DIR=/tmp/c-race WINNOW_TEST_CACHE_DIR=/tmp/c-race timeout ${ST:-540} "$SAN" \
     --tool racecheck --racecheck-report hazard --print-limit 200 .gpu-kit/winnow_tests "$RACE" \
     -r console --durations yes > "$O/racecheck.txt" 2>&1; note "racecheck rc=$?") &
  (WINNOW_CACHE_DIR=/tmp/c-mem WINNOW_TEST_CACHE_DIR=/tmp/c-mem timeout ${ST:-540} "$SAN" \
     --tool memcheck --print-limit 200 .gpu-kit/winnow_tests "$CASES" \
     -r console --durations yes > "$O/memcheck.txt" 2>&1; note "memcheck rc=$?") &
  wait
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|test cases:|All tests passed" "$O"/*check.txt |
    tee -a "$O/summary.txt"
  ;;
bench)
  # The base build's and this build's binaries in one run, alternating per workload, with
  # the torch baselines and ceilings of this run; then ncu's per-launch durations of a
  # decode call at 64 x 64K for both. EXTRA="a b": the builds .gpu-kit/a/winnow,
  # .gpu-kit/b/winnow (wrappers or other builds), timed on decode too.
  # (ceilings.py takes the file as its argument: with stdout redirected into it the file
  # stays empty and the ratios fall back to the card's published copy bandwidth, docs/performance.md)
  python3 bench/ceilings.py "$O/ceilings.json" > "$O/ceilings.txt" 2> "$O/ceilings.err"
  timeout 200 python3 bench/torch_baselines.py "$O/baselines.json" \
    --decode "64x65536:1:2048,128x4096:1:2048,63x1024+1x1048576:1:2048" 2>&1 | tail -n 4
  note "baselines"
  # Decode first (every build), then the profiles, then knn and prefill (base, this):
  # a step past 470 s is skipped so that the tar at the end is made within the call.
  bench_run() {  # run-arguments builds...
    local r=$1 b bin; shift
    for b in "$@"; do
      [ $((SECONDS - t0)) -gt ${BENCH_LIMIT:-470} ] && { note "skipped $b $r (time)"; continue; }
      bin=.gpu-kit/winnow; [ $b != this ] && [ -x .gpu-kit/$b/winnow ] && bin=.gpu-kit/$b/winnow
      WINNOW_CACHE_DIR=/tmp/c-bench-$b timeout 150 $bin bench $r \
        --ceilings "$O/ceilings.json" --baselines "$O/baselines.json" \
        > "$O/bench-$b-${r%% *}.jsonl" 2> "$O/bench-$b-${r%% *}.txt"
      note "bench $b $r rc=$?"
    done
  }
  extra=(); for x in ${EXTRA:-}; do [ -x .gpu-kit/$x/winnow ] && extra+=($x); done
  bench_run "dsa-decode --B 64,128 --len 4K,64K --mixed 63x1K+1x1M --graph 1x128,64x64K,128x4K,63x1K+1x1M" base this "${extra[@]}"
  # Where the stream kernel's time goes at 64 x 64K (this build): warp states,
  # scheduler statistics and per-instruction stall samples of one round-0 launch (the
  # call's second stream launch; the first is the sample pass).
  WINNOW_CACHE_DIR=/tmp/c-bench-this timeout 120 ncu -k regex:winnow_paged_stream -s 1 -c 1 \
    --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    --import-source no --export "$O/stream-profile" \
    .gpu-kit/winnow bench dsa-decode --B 64 --len 64K --mixed none --graph none --repeats 1 --warmup 0 \
    > "$O/ncu-stream-details.txt" 2>&1
  note "ncu stream profile rc=$?"
  timeout 60 ncu --import "$O/stream-profile.ncu-rep" --page source --csv --print-source sass \
    > "$O/ncu-stream-sass.csv" 2> "$O/ncu-stream-sass.err"
  note "ncu source page rc=$?"
  # Each launch's duration in a decode call at 64 x 64K.
  for b in base this "${extra[@]}"; do
    [ $((SECONDS - t0)) -gt ${BENCH_LIMIT:-470} ] && { note "skipped ncu $b (time)"; continue; }
    bin=.gpu-kit/winnow; [ $b != this ] && [ -x .gpu-kit/$b/winnow ] && bin=.gpu-kit/$b/winnow
    WINNOW_CACHE_DIR=/tmp/c-bench-$b timeout 60 \
      ncu --metrics gpu__time_duration.sum \
      $bin bench dsa-decode --B 64 --len 64K --mixed none --graph none --repeats 1 --warmup 0 \
      > "$O/ncu-$b.txt" 2>&1
    note "ncu $b rc=$?"
  done
  bench_run "knn-ip --T 1M --k 128,8192 --no-tuned" base this
  bench_run "dsa-prefill --T 64K --no-tuned" base this
  ;;
llvm)
  # The LLVM backend's kernels (a cache filled on the CPU machine by this build)
  # against NVRTC's, one run; then the cold builds of NVRTC's first tier with and without
  # -split-compile on this machine's 16 cores (the 1 s cold-build goal).
  mkdir -p /tmp/llvmcache && tar -C /tmp -xzf .gpu-kit/llvm-cache.tar.gz
  for be in nvrtc llvm; do
    for r in "dsa-prefill --T 64K" "knn-ip --T 1M --k 128,8192"; do
      cache=/tmp/c-nvrtc; [ $be = llvm ] && cache=/tmp/llvmcache
      WINNOW_BACKEND=$be WINNOW_CACHE_DIR=$cache timeout 150 .gpu-kit/winnow bench $r --no-tuned \
        >> "$O/llvm-speed.jsonl" 2>> "$O/llvm-speed.txt"
      note "bench $be $r rc=$?"
    done
  done
  timeout 200 .gpu-kit/winnow bench jit --kernels relu_mh,softplus --backends nvrtc --fast-first \
    > "$O/jit.jsonl" 2> "$O/jit.txt"
  note "jit rc=$?"
  WINNOW_NVRTC_OPTIONS="-Ofc=max -split-compile=0" timeout 120 .gpu-kit/winnow bench jit \
    --kernels relu_mh,softplus --backends nvrtc > "$O/jit-ofc-split.jsonl" 2> "$O/jit-ofc-split.txt"
  note "jit -Ofc=max -split-compile=0 rc=$?"
  WINNOW_NVRTC_OPTIONS="-Ofc=max" timeout 120 .gpu-kit/winnow bench jit \
    --kernels relu_mh,softplus --backends nvrtc > "$O/jit-ofc.jsonl" 2> "$O/jit-ofc.txt"
  note "jit -Ofc=max rc=$?"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
# The step's folder becomes $OUT/<step>.tar.gz here: a caller's own tar of $OUT/<step> after
# this finds no folder and writes an empty archive over it.
tar -C "$OUT" -czf "$OUT/$step.tar.gz" "$step" && rm -rf "$O"
echo "gpu_compare: $step's files are in $OUT/$step.tar.gz ($(du -k "$OUT/$step.tar.gz" | cut -f1) KB)"
