#!/usr/bin/env bash
# The most in one device call: the suites side by side, each in ONE process with its own
# kernel cache (the default order, a shuffled order, and optionally the suite under
# VARIANT_ENV), the C program and a warm-up of the bench kernels beside them; then the benchmark ALONE on the GPU, each
# run under every environment of BENCH_ENVS; the caches are tarred before the bench so a
# timeout cannot lose them. Binaries from .gpu-kit/ (cp build/winnow build/winnow_tests
# build/winnow_c_two_contexts .gpu-kit/ && cp -L build/libwinnow.so.0 .gpu-kit/, or
# dev/pack_binaries.sh, whose .xz files are unpacked here).
#
# Env: TESTS (Catch2 spec, default '[gpu]~[knn]'; "-" skips the suites), TT (seconds per
# suite, default 400), VARIANT_ENV (e.g. "WINNOW_TOPK_PIPELINE=1": a third suite under it;
# empty: none), BENCH (';'-separated `winnow bench` argument lists), BENCH_ENVS ('|'-
# separated environments, each "" or "NAME=VALUE ..."; default one empty: the plain run),
# BENCH_TIMEOUT (per run, default 120), TORCH_TOPK (bench/torch_baselines.py --topk),
# SDPA_L (sizes for bench/sdpa_dense.py, e.g. "16K 128K": dense SDPA for block-select runs),
# TORCH_KNN ("BxNxDxK,..."), TORCH_DECODE ("LENS:NEXT_N:K,..."): more torch baselines;
# WARM_ONLY=1: the bench kernels compiled beside the suites, no timed bench (a later call
# with the same build and caches.tar.gz times them). A BENCH run may start with NAME=VALUE
# words, its own environment (e.g. "WINNOW_KNN_RETRIEVAL=1 knn-ip --T 1M").
# The default and shuffled suites share one kernel cache (/tmp/c-suite): a cold run
# compiles each plan once. PREWARM=P: before the suites (or alone, with TESTS=-), every case
# of PREWARM_SPEC (default TESTS, or '[gpu]') in its own process, P at a time, into that
# cache: it only fills the cache (a case per process is no pass; prewarm.txt keeps what
# they printed) so that the one-process suites after it, or in a later call with the
# returned caches, run warm. SIDE: one shell command run beside the suites and the warm-up
# (e.g. a racecheck), its output in side.txt. ONLY_VARIANT=1: only the suite under
# VARIANT_ENV (not the default and shuffled ones). VARIANT_CACHE: the variant suite's kernel
# cache (default /tmp/c-variant; /tmp/c-suite shares the prewarmed one: the cache key holds
# the options, so kernels the variant changes are still its own).
# Everything under $OUT/v, then $OUT/run.tar.gz (the folder removed) (and $OUT/caches.tar.gz: each suite's
# kernel cache (WINNOW_TEST_CACHE_DIR) and the bench's; put it in .gpu-kit/ for the next
# call with the same build and the suites run warm).
set -o pipefail
bash "$(dirname "$0")/unpack_binaries.sh"  # no-op unless dev/pack_binaries.sh compressed them
export LD_LIBRARY_PATH=.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_TEST_TOOL=$PWD/.gpu-kit/winnow  # the tool tests run the carried binary
export PYTHONUNBUFFERED=1
B=.gpu-kit; O=${OUT:-out}/v; mkdir -p "$O"
t0=$SECONDS
# Kernel caches of an earlier run with the same build (the cache key holds the commit).
[ -f "$B/caches.tar.gz" ] && tar -C /tmp -xzf "$B/caches.tar.gz"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/gpu.txt"
TT=${TT:-400}; SPEC=${TESTS:-[gpu]~[knn]}
IFS='|' read -ra envs <<< "${BENCH_ENVS:-}"
[ ${#envs[@]} -eq 0 ] && envs=("")
IFS=';' read -ra runs <<< "${BENCH:-}"
# A run's leading NAME=VALUE words (its environment) into pre, the rest into args.
split_run() {
  pre=(); args=(); local w
  for w in $1; do
    if [ ${#args[@]} -eq 0 ] && [[ "$w" =~ ^[A-Z_][A-Z0-9_]*= ]]; then pre+=("$w"); else args+=("$w"); fi
  done
}
suite() {  # name cache-dir env... -- catch2 args...
  local name=$1 cache=$2; shift 2
  local envv=(); while [ "$1" != "--" ]; do envv+=("$1"); shift; done; shift
  env WINNOW_CACHE_DIR="$cache" WINNOW_TEST_CACHE_DIR="$cache" "${envv[@]}" timeout "$TT" "$B/winnow_tests" "$SPEC" "$@" \
    -r console --durations yes > "$O/$name.txt" 2>&1
  echo "$name rc=$? at $((SECONDS - t0)) s :: $(grep -E 'All tests passed|test cases:' "$O/$name.txt" | tail -n 1)" \
    >> "$O/summary.txt"
}
prewarm() {  # every case of $1 in its own process, $2 at a time, into /tmp/c-suite
  "$B/winnow_tests" "$1" --list-test-names-only | grep -v '^$' | sed -e 's/[]\\,[*]/\\&/g' > /tmp/prewarm-cases.txt
  tr '\n' '\0' < /tmp/prewarm-cases.txt | WINNOW_CACHE_DIR=/tmp/c-suite WINNOW_TEST_CACHE_DIR=/tmp/c-suite \
    xargs -0 -P "$2" -I{} timeout "${PREWARM_TIMEOUT:-240}" "$B/winnow_tests" {} >> "$O/prewarm.txt" 2>&1
  echo "prewarm of $(wc -l < /tmp/prewarm-cases.txt) cases ($1, $2 at a time) done at $((SECONDS - t0)) s" >> "$O/summary.txt"
}
[ -n "${SIDE:-}" ] && (bash -c "$SIDE" > "$O/side.txt" 2>&1; echo "side rc=$? at $((SECONDS - t0)) s" >> "$O/summary.txt") &
if [ -n "${PREWARM:-}" ]; then
  pspec=${PREWARM_SPEC:-$SPEC}; [ "$pspec" = "-" ] && pspec='[gpu]'
  if [ "$SPEC" = "-" ]; then prewarm "$pspec" "$PREWARM" & else prewarm "$pspec" "$PREWARM"; fi
fi
if [ "$SPEC" != "-" ]; then
  seed=${ORDER_SEED:-$(( (RANDOM << 15 | RANDOM) + 1 ))}
  if [ -z "${ONLY_VARIANT:-}" ]; then
    suite tests_default /tmp/c-suite -- &
    suite tests_rand /tmp/c-suite -- --order rand --rng-seed "$seed" &
  fi
  [ -n "${VARIANT_ENV:-}" ] && { read -ra venv <<< "$VARIANT_ENV"; suite tests_variant "${VARIANT_CACHE:-/tmp/c-variant}" "${venv[@]}" -- & }
  (WINNOW_CACHE_DIR=/tmp/c-c timeout 120 "$B/winnow_c_two_contexts" > "$O/c_two_contexts.txt" 2>&1
   echo "C program rc=$? (77: skipped)" >> "$O/summary.txt") &
fi
# The bench kernels, compiled beside the suites (one untimed run each).
(for r in "${runs[@]}"; do
   for e in "${envs[@]}"; do
     read -ra ev <<< "$e"; split_run "$r"
     env WINNOW_CACHE_DIR=/tmp/c-bench "${ev[@]}" "${pre[@]}" timeout "${BENCH_TIMEOUT:-120}" "$B/winnow" bench \
       "${args[@]}" --repeats 1 --warmup 0 >> "$O/warm.txt" 2>&1
     echo "warm ${pre[*]} ${args[*]} [$e]: rc=$? at $((SECONDS - t0)) s" >> "$O/summary.txt"
   done
 done) &
wait
echo "suites done at $((SECONDS - t0)) s (shuffled seed ${seed:-none})"; cat "$O/summary.txt" 2>/dev/null
tar -C /tmp -czf "${OUT:-out}/caches.tar.gz" c-suite c-variant c-bench 2>/dev/null
if [ ${#runs[@]} -gt 0 ] && [ -z "${WARM_ONLY:-}" ]; then
  export WINNOW_CACHE_DIR=/tmp/c-bench
  timeout 100 python3 bench/ceilings.py "$O/ceilings.json" 2>&1 | tail -n 1
  base=()
  if [ -n "${TORCH_TOPK:-}${TORCH_KNN:-}${TORCH_DECODE:-}" ]; then
    timeout "${TORCH_TIMEOUT:-240}" python3 bench/torch_baselines.py "$O/baselines.json" \
      ${TORCH_TOPK:+--topk "$TORCH_TOPK"} ${TORCH_KNN:+--knn "$TORCH_KNN"} \
      ${TORCH_DECODE:+--decode "$TORCH_DECODE"} 2>&1 | tail -n 8
    base=(--baselines "$O/baselines.json")
  fi
  dense=()
  if [ -n "${SDPA_L:-}" ]; then
    timeout 300 python3 bench/sdpa_dense.py "$O/sdpa.jsonl" $SDPA_L 2>&1 | tail -n 3
    dense=(--dense "$O/sdpa.jsonl")
  fi
  for r in "${runs[@]}"; do
    split_run "$r"; extra=("${base[@]}")
    [ "${args[0]}" = block-select ] && extra=("${dense[@]}")
    for e in "${envs[@]}"; do
      read -ra ev <<< "$e"
      env "${ev[@]}" "${pre[@]}" timeout "${BENCH_TIMEOUT:-120}" "$B/winnow" bench "${args[@]}" --ceilings "$O/ceilings.json" \
        "${extra[@]}" --out "$O/bench.jsonl" >> "$O/bench.txt" 2>&1
      echo "bench $r [$e]: rc=$? at $((SECONDS - t0)) s"
    done
  done
  grep -E "^[a-z-]+ +T=|^[a-z-]+ +S=" "$O/bench.txt"
fi
tar -C "$(dirname "$O")" -czf "${OUT:-out}/run.tar.gz" v
# What comes back from the machine is a few files (a count limit): the tar, not its folder.
rm -rf "$O"
