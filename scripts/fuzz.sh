#!/usr/bin/env bash
# Builds the libFuzzer target (build-fuzz/, clang, ASan + UBSan) and runs it for a bounded
# time: first every file of tests/fuzz/regressions/ once, then fuzzing from the seed corpus
# tests/fuzz/corpus/ for [seconds] (default 60). Exits non-zero on any finding or crash;
# the last line says which, and where the reproducer was saved (build-fuzz/findings/).
#   scripts/fuzz.sh 60                  # what CI runs
#   scripts/fuzz.sh 600 -runs=1000000   # extra arguments go to libFuzzer
# WINNOW_FUZZ_SKIP and WINNOW_FUZZ_PRODUCTS pass through (tests/fuzz/fuzz_score.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."

# The finding's own report (winnow-fuzz finding ... up to libFuzzer's line), or the first
# lines of a sanitizer's.
show_finding() {
  sed -n '/^winnow-fuzz finding:/,/== ERROR: libFuzzer/p' "$1" | grep -v '== ERROR: libFuzzer'
  grep -m1 -A4 'ERROR: AddressSanitizer\|runtime error:\|ERROR: libFuzzer: \(timeout\|out-of-memory\|fuzz target\)' "$1" || true
}

seconds=${1:-60}
shift || true
case "$seconds" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [seconds] [libFuzzer args...]" >&2; exit 2 ;; esac

if [ ! -f build-fuzz/CMakeCache.txt ]; then
  cuda_root=()
  if ! command -v nvcc >/dev/null 2>&1 && [ -d /usr/local/cuda ]; then
    cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWINNOW_FUZZ=ON "${cuda_root[@]}"
fi
cmake --build build-fuzz --target winnow_fuzz_score
fuzzer=build-fuzz/winnow_fuzz_score

findings=build-fuzz/findings
work_corpus=build-fuzz/fuzz-corpus
mkdir -p "$findings" "$work_corpus"
log=build-fuzz/fuzz.log
status=0

# 1. Regressions: each once, so one failure does not hide the next.
failed_regressions=()
shopt -s nullglob
for f in tests/fuzz/regressions/*.txt; do
  if ! "$fuzzer" "$f" >"$log.replay" 2>&1; then
    echo "fuzz: regression $f fails:"
    show_finding "$log.replay"
    failed_regressions+=("$f")
  fi
done
if [ ${#failed_regressions[@]} -gt 0 ]; then
  echo "fuzz: ${#failed_regressions[@]} regression(s) fail: ${failed_regressions[*]}"
  status=1
fi

# 2. Bounded fuzzing. Findings are saved under build-fuzz/findings/ (crash-*, timeout-*,
# oom-*); new coverage goes to build-fuzz/fuzz-corpus/, never into the committed seeds.
set +e
started=$SECONDS
"$fuzzer" "$work_corpus" tests/fuzz/corpus \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -error_exitcode=77 -timeout_exitcode=77 -print_final_stats=1 \
  -artifact_prefix="$findings/" "$@" >"$log" 2>&1
fuzz_rc=$?
set -e
elapsed=$((SECONDS - started))
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
corpus_files=$(find "$work_corpus" -type f | wc -l)
if [ "$fuzz_rc" -ne 0 ]; then
  show_finding "$log"
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  regressions_note=""
  if [ "$status" -ne 0 ]; then regressions_note="; ${#failed_regressions[@]} regression(s) fail too"; fi
  echo "fuzz: FINDING after ${runs:-?} runs (exit $fuzz_rc); reproducer: ${artifact:-none saved}; log: $log${regressions_note}"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "fuzz: FAIL - regressions fail (above); fuzzing itself: ${runs:-?} runs, ${rate:-?} exec/s, no new finding"
  exit 1
fi
skipped=$(sed -n 's/^winnow-fuzz finding (skipped from now on): //p' "$log" | sort -u | paste -sd, -)
if [ -n "$skipped" ]; then
  echo "fuzz: PASS (with WINNOW_FUZZ_SKIP) - ${runs:-?} runs in ${elapsed} s (${rate:-?} exec/s), no finding outside the skipped kinds; skipped kinds seen: ${skipped}; corpus ${corpus_files} files"
else
  echo "fuzz: PASS - ${runs:-?} runs in ${elapsed} s (${rate:-?} exec/s), no finding, corpus ${corpus_files} files"
fi
