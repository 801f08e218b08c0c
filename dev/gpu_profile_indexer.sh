#!/usr/bin/env bash
# One call on the GPU machine: where the indexer prefill's time goes, side by side. Nsight
# Compute (the full set) of DeepGEMM's fp8_mqa_logits, winnow's materialize kernel and
# winnow's fused kernel on dsa-prefill at each T, and winnow's phase clocks
# (-DWINNOW_PHASE_CLOCKS=1: CTA 0 prints the cycles of each step of the fused kernel).
# Carry [".gpu-kit", ".anchors"] (dev/pack_binaries.sh; the anchors kit of ../shared/anchors,
# which builds DeepGEMM); .gpu-kit/bench-cache.tar.gz may hold the kernels, compiled on the
# CPU machine into /tmp/bench-cache with and without the phase clocks' option.
#
#   OUT=$OUT bash dev/gpu_profile_indexer.sh          # TS="64K 1M" by default
#   WINNOW=0 OUT=$OUT bash dev/gpu_profile_indexer.sh # DeepGEMM's kernel only
#
# $OUT/profile.tar.gz holds the reports (*.ncu-rep), their raw metrics (*.csv) and the
# phase clocks' output; dev/ncu_table.py turns the CSVs into the side-by-side table.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/profile"; P=$(cd "$OUT/profile" && pwd)
repo=$PWD
bash dev/unpack_binaries.sh
export LD_LIBRARY_PATH=$repo/.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
[ -f .gpu-kit/bench-cache.tar.gz ] && tar -C /tmp -xzf .gpu-kit/bench-cache.tar.gz
export WINNOW_CACHE_DIR=/tmp/bench-cache
W=$repo/.gpu-kit/winnow
t0=$SECONDS
note() { echo "$* (at $((SECONDS - t0)) s)" | tee -a "$P/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$P/gpu.txt"
NCU="ncu --set full --clock-control none --target-processes all"
# DeepGEMM built in /tmp/anchors by the kit (engines.py runs no part with PARTS=none).
[ -f /tmp/anchors/dg/deep_gemm/.built ] || PARTS=none bash .anchors/run.sh .anchors > "$P/anchors-build.txt" 2>&1
note "deepgemm built: $([ -f /tmp/anchors/dg/deep_gemm/.built ] && echo yes || echo no)"

size() { case $1 in *K) echo $(( ${1%K} * 1024 ));; *M) echo $(( ${1%M} * 1048576 ));; *) echo "$1";; esac; }
for t in ${TS:-64K 1M}; do
  n=$(size "$t")
  (cd /tmp/anchors/dg && PYTHONPATH=$PWD LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 \
     timeout 240 $NCU -k regex:mqa_logits -s 1 -c 1 -f -o "$P/deepgemm-$t" \
     python3 "$repo/dev/deepgemm_logits.py" "$n") > "$P/deepgemm-$t.txt" 2>&1
  note "ncu deepgemm T=$t rc=$?"
  [ "${WINNOW:-1}" = 0 ] && continue
  # The bench runs the materialize kernel first, then the fused one: launches 1 and 2.
  timeout 240 $NCU -k regex:winnow_topk -c 2 -f -o "$P/winnow-$t" \
    "$W" bench dsa-prefill --T "$t" --repeats 1 --warmup 0 --check-rows 0 --no-tuned > "$P/winnow-$t.txt" 2>&1
  note "ncu winnow T=$t rc=$?"
done
for f in "$P"/*.ncu-rep; do
  ncu -i "$f" --page raw --csv > "${f%.ncu-rep}.csv" 2>/dev/null
  ncu -i "$f" --page details > "${f%.ncu-rep}-details.txt" 2>/dev/null
done
note "exported"
# Phase clocks: CTA 0 of the fused kernel prints its cycles per step (a kernel of its own key).
[ "${WINNOW:-1}" = 0 ] || WINNOW_NVRTC_OPTIONS=-DWINNOW_PHASE_CLOCKS=1 timeout 240 "$W" bench dsa-prefill --T "$(echo ${TS:-64K 1M} | tr ' ' ,)" \
  --repeats 1 --warmup 0 --check-rows 0 --no-tuned > "$P/phase-clocks.txt" 2>&1
note "phase clocks rc=$?"
python3 dev/ncu_table.py "$P"/*.csv | tee "$P/table.md"
tar -C "$P/.." -czf "$OUT/profile.tar.gz" profile && rm -rf "$P"
