#!/usr/bin/env bash
# Cold compile of new score functions with each backend, `winnow compile --timings`
# breakdowns one after the other in one run. Needs no GPU: a CPU measurement.
# Usage: dev/compile_timings.sh [build/winnow] > bench/results/<date>-compile-backends-cpu-<commit>.txt
set -euo pipefail
tool=${1:-build/winnow}
export WINNOW_DISABLE_DISK_CACHE=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u +%FT%TZ) $("$tool" --version | head -1); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
run() {
  local what=$1; shift
  for be in nvrtc llvm; do
    for rep in 1 2; do
      echo "## $what, $be, run $rep"
      # The summary and the phases only (not the compilers' warnings).
      "$tool" compile "$@" --arch sm_90a --emit cubin -o "$out/k.cubin" --backend "$be" --timings 2>&1 |
        grep -E '^(compiled for |  [A-Za-z].* ms$)' || true
    done
  done
}
run "relu_mh fp8 H=64 top-k" --score relu_mh
run "user expression sum_h(w[h]*softplus(dot(h)))*kscale, bf16 H=16" \
  --expr 'sum_h(w[h] * softplus(dot(h))) * kscale' --q-dtype bf16 --heads 16 --k 256
run "ip fp16 d=768 k=8192 top-k" --score ip --q-dtype fp16 --dim 768 --k 8192
run "ip fp32 materialize" --score ip --q-dtype fp32 --mode materialize
