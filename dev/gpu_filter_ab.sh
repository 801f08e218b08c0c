#!/usr/bin/env bash
# One device call for the pending kernel changes (run from the repository root, carry
# [".gpu-kit", ".anchors"]): main's [gpu] suite in one process, both orders (dev/gpu_compare.sh
# suites, .gpu-kit = main's build by dev/pack_binaries.sh), the engines' build beside it;
# then, the GPU alone, the engines' records (.anchors/run.sh) and `winnow bench` of the
# pending build (.gpu-kit/pending/winnow.xz) under each filter switch, 64K first, then the
# decode A/B against main's binary, then 1M; a step that would start past LIM seconds is
# skipped. Kernel cache: .gpu-kit/kc.tar.gz (/tmp/kc-pend, filled by the pending build's
# `bench --compile-only` for each switch). SIDE: a command run beside the suites (e.g.
# sanitizers over .gpu-kit/pending/winnow_tests).
#   LIM=430 OUT=$OUT bash dev/gpu_filter_ab.sh
set -o pipefail
T0=$SECONDS; OUT=${OUT:-out}; LIM=${LIM:-470}
O=$OUT/bench; mkdir -p $O
bash dev/unpack_binaries.sh
tar -C /tmp -xzf .gpu-kit/kc.tar.gz
note() { echo "$* (at $((SECONDS - T0)) s)" | tee -a $O/summary.txt; }
(PARTS=none DET=0 bash .anchors/run.sh .anchors > $O/anchors-build.txt 2>&1; echo "anchors build rc=$? at $((SECONDS - T0)) s" >> $O/summary.txt) &
abuild=$!
SIDE=${SIDE:-} OUT=$OUT TT=${TT:-330} bash dev/gpu_compare.sh suites > $OUT/suites-log.txt 2>&1
note "suites returned"
wait $abuild
export LD_LIBRARY_PATH=.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
PARTS=dsa,decode DET=0 timeout 180 bash .anchors/run.sh .anchors > $O/engines.jsonl 2> $O/engines.err
note "engines rc=$?"
P=.gpu-kit/pending/winnow
ANC=(--anchors $O/engines.jsonl); grep -q ms_median $O/engines.jsonl || ANC=()
b() {  # name env... -- args
  local name=$1; shift; local envv=(); while [ "$1" != "--" ]; do envv+=("$1"); shift; done; shift
  [ $((SECONDS - T0)) -gt $LIM ] && { note "skipped $name (time)"; return; }
  env "${envv[@]}" timeout 100 "$@" "${ANC[@]}" > $O/$name.jsonl 2> $O/$name.txt
  note "$name rc=$?"
}
b hold1-64a WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-prefill --T 64K --no-tuned
b hold0-64a WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_HOLD=0 -- $P bench dsa-prefill --T 64K --no-tuned
b seg1-64a WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_SEGMENTS=1 -- $P bench dsa-prefill --T 64K --no-tuned
b agg1-64a WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_AGG=1 -- $P bench dsa-prefill --T 64K --no-tuned
b dec-main-a WINNOW_CACHE_DIR=/tmp/kc-main -- .gpu-kit/winnow bench dsa-decode --B 64,128 --len 4K,64K --mixed 63x1K+1x1M --graph 1x128,64x64K,128x4K,128x64K --repeats 20
b dec-pend-a WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-decode --B 64,128 --len 4K,64K --mixed 63x1K+1x1M --graph 1x128,64x64K,128x4K,128x64K --repeats 20
b hold1-1ma WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-prefill --T 1M --no-tuned
b hold0-1ma WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_HOLD=0 -- $P bench dsa-prefill --T 1M --no-tuned
b seg1-1ma WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_SEGMENTS=1 -- $P bench dsa-prefill --T 1M --no-tuned
b hold1-64b WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-prefill --T 64K --no-tuned
b hold0-64b WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_HOLD=0 -- $P bench dsa-prefill --T 64K --no-tuned
b seg1-64b WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_SEGMENTS=1 -- $P bench dsa-prefill --T 64K --no-tuned
b hold0seg1-64b WINNOW_CACHE_DIR=/tmp/kc-pend "WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_HOLD=0 -DWINNOW_FILTER_SEGMENTS=1" -- $P bench dsa-prefill --T 64K --no-tuned
b agg1-64b WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_AGG=1 -- $P bench dsa-prefill --T 64K --no-tuned
b dec-main-b WINNOW_CACHE_DIR=/tmp/kc-main -- .gpu-kit/winnow bench dsa-decode --B 64,128 --len 4K,64K --mixed 63x1K+1x1M --graph 1x128,64x64K,128x4K,128x64K --repeats 20
b dec-pend-b WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-decode --B 64,128 --len 4K,64K --mixed 63x1K+1x1M --graph 1x128,64x64K,128x4K,128x64K --repeats 20
b sample1024 WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-prefill --T 64K --point sample_size=1024
b bins1024 WINNOW_CACHE_DIR=/tmp/kc-pend -- $P bench dsa-prefill --T 64K --point bins=1024
b refresh16 WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_GATE_REFRESH_TILES=16 -- $P bench dsa-prefill --T 64K --no-tuned
b agg1-1ma WINNOW_CACHE_DIR=/tmp/kc-pend WINNOW_NVRTC_OPTIONS=-DWINNOW_FILTER_AGG=1 -- $P bench dsa-prefill --T 1M --no-tuned
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt
tar -C $OUT -czf $OUT/bench.tar.gz bench && rm -rf $O
echo "call1 done at $((SECONDS - T0)) s"
