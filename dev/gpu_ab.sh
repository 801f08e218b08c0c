#!/usr/bin/env bash
# One call on the GPU machine: builds (or one build under several NVRTC options) timed
# against each other, alternating run by run, then the engines' records of the same run,
# then racecheck and memcheck with the time left. Every step is guarded by the call's
# clock and the results are tarred as they come, so a call cut short still returns them.
#
#   BUILDS='base|.gpu-kit/base/winnow|;new|.gpu-kit/winnow|;q6|.gpu-kit/winnow|-DNAME=6' \
#   RUNS='dsa-prefill --T 64K;dsa-prefill --T 256K' OUT=$OUT bash dev/gpu_ab.sh
#
# Carry [".gpu-kit", ".anchors"] (dev/pack_binaries.sh with BASE=<ref> fills .gpu-kit/;
# .anchors/ is ../shared/anchors prepared as its README says). dev/ab_caches.sh compiles
# every build's kernels for RUNS on the CPU machine into .gpu-kit/ab-caches.tar.gz, so
# nothing is compiled here.
#
# Env:
#   BUILDS   ';'-separated tag|binary|NVRTC options (WINNOW_NVRTC_OPTIONS; empty: none)
#   RUNS     ';'-separated `winnow bench` argument lists; each is run for every build in
#            turn, the builds' order reversed in every other round
#   ROUNDS   how many times RUNS is gone through (default 1)
#   BENCH_FLAGS  added to every run (default "--repeats 7 --warmup 1 --no-tuned")
#   LIM      no run starts past this many seconds (default 360)
#   ENG      the engines (PARTS of .anchors/engines.py, default dsa; DET, default 1) are
#            not started past this (default 450); DeepGEMM and FlashInfer are built in the
#            background from the start (CPU only), measured after winnow
#   TOTAL    the call's own limit in seconds (default 580): racecheck and memcheck
#            (dev/gpu_compare.sh sanitize, RACE and CASES passed on) take what is left when
#            more than 150 s is; SANITIZE=0 skips them
#   SKIPCEIL=1  no ceilings (the floor ratios fall back to the card's published values)
# Files: $OUT/ab/{summary.txt,gpu.txt,ceilings.json,bench-<tag>.jsonl,bench-<tag>.txt,
# engines.jsonl,sanitize/...}, all in $OUT/ab.tar.gz. dev/ab_merge.py makes one result file
# of them.
set -o pipefail
OUT=${OUT:-out}; R=$OUT/ab; mkdir -p "$R"
t0=$SECONDS
note() { echo "$* (at $((SECONDS - t0)) s)" | tee -a "$R/summary.txt"; }
pack() { tar -C "$OUT" -czf "$OUT/ab.tar.gz" ab; }
bash "$(dirname "$0")/unpack_binaries.sh" > "$R/unpack.txt" 2>&1
export LD_LIBRARY_PATH=$PWD/.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$R/gpu.txt"
git log --oneline -1 > "$R/commit.txt" 2>/dev/null
mkdir -p /tmp/cab && [ -f .gpu-kit/ab-caches.tar.gz ] && tar -C /tmp/cab -xzf .gpu-kit/ab-caches.tar.gz
note "start: $(tail -n 1 "$R/gpu.txt")"
bpid=
if [ -f .anchors/run.sh ]; then
  (PARTS=none bash .anchors/run.sh .anchors > "$R/anchors-build.txt" 2>&1
   echo "rc=$?" >> "$R/anchors-build.txt") &
  bpid=$!
fi
[ -z "${SKIPCEIL:-}" ] && timeout 60 python3 bench/ceilings.py "$R/ceilings.json" > "$R/ceilings.txt" 2>&1
[ -s "$R/ceilings.json" ] || echo '{}' > "$R/ceilings.json"
note "ceilings $(cat "$R/ceilings.json")"

IFS=';' read -r -a builds <<< "${BUILDS:?BUILDS: tag|binary|options;...}"
IFS=';' read -r -a runs <<< "${RUNS:?RUNS: bench arguments;...}"
flags=${BENCH_FLAGS:---repeats 7 --warmup 1 --no-tuned}
lim=${LIM:-360}
one() {  # build-entry run-arguments
  local tag bin opts
  IFS='|' read -r tag bin opts <<< "$1"
  [ $((SECONDS - t0)) -gt $lim ] && { note "skipped $tag $2 (time)"; return; }
  local args; read -r -a args <<< "$2"
  echo "# $tag: bench ${args[0]} $flags ${args[*]:1} (NVRTC options: ${opts:-none})" >> "$R/bench-$tag.txt"
  # The run's own flags come after the common ones, so they win (e.g. --repeats at 1M).
  # shellcheck disable=SC2086
  WINNOW_NVRTC_OPTIONS="$opts" WINNOW_CACHE_DIR=/tmp/cab/$tag timeout 120 "$bin" bench "${args[0]}" \
    $flags "${args[@]:1}" --ceilings "$R/ceilings.json" --out "$R/bench-$tag.jsonl" >> "$R/bench-$tag.txt" 2>&1
  local rc=$?
  [ -s "$R/bench-$tag.jsonl" ] || { note "$tag $2 rc=$rc (no records)"; pack; return; }
  note "$tag $2 rc=$rc :: $(python3 - "$R/bench-$tag.jsonl" <<'PY' 2>&1 | tail -n 1
import json, sys
last = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("impl") in ("winnow", "winnow-stream", "winnow-stream-graph"):
        last = r
if last:
    print(last["workload"], last["params"].get("T", last["params"].get("lens")), last["ms_median"],
          "fallbacks", last.get("fallbacks"), "exact", last.get("exact"),
          "to materialize", last.get("ratio_to_materialize"))
PY
)"
  pack
}
for ((round = 0; round < ${ROUNDS:-1}; ++round)); do
  for run in "${runs[@]}"; do
    if ((round % 2 == 0)); then
      for b in "${builds[@]}"; do one "$b" "$run"; done
    else
      for ((i = ${#builds[@]} - 1; i >= 0; --i)); do one "${builds[i]}" "$run"; done
    fi
  done
done

if [ -n "$bpid" ]; then
  wait "$bpid"; note "engines' build: $(tail -n 1 "$R/anchors-build.txt")"
  if [ $((SECONDS - t0)) -lt ${ENG:-450} ]; then
    PARTS=${PARTS:-dsa} DET=${DET:-1} timeout $((${TOTAL:-580} - 10 - (SECONDS - t0))) \
      bash .anchors/run.sh .anchors > "$R/engines.jsonl" 2> "$R/engines.err"
    note "engines rc=$? $(wc -l < "$R/engines.jsonl") records"
  else
    note "engines skipped (time)"
  fi
  pack
fi
left=$((${TOTAL:-580} - (SECONDS - t0)))
if [ "${SANITIZE:-1}" = 1 ] && [ $left -gt 150 ]; then
  note "sanitize with $left s"
  ST=$((left - 15)) OUT=$R bash "$(dirname "$0")/gpu_compare.sh" sanitize > "$R/sanitize-out.txt" 2>&1
  note "sanitize rc=$? $(tail -n 4 "$R/sanitize-out.txt" | tr '\n' ' ')"
fi
pack
cat "$R/summary.txt"
