#!/usr/bin/env bash
# The LLVM backend on the GPU machine, with .gpu-kit/libwinnow_llvm.so linked statically
# (dev/pack_binaries.sh): the llvm backend compiles there. Steps, several per call:
#   jit       `winnow compile --timings` of relu_mh under both backends, then `winnow bench
#             jit` with both backends and NVRTC's first tier in one run (the cold-build goal)
#   knn       the [gpu][knn] cases under NVRTC in one process (templates/knn/knn_stream.cuh changed)
#   sanitize  memcheck over the [gpu][knn] cases (shrunk) and racecheck over the tightening
#             case and an ip case under NVRTC; memcheck of the tightening case under llvm.
#             racecheck runs the kernels with the slot spin raised (-DWINNOW_KNN_TIGHTEN_SPIN):
#             at the default 4096 tries a tightening gave up under racecheck's slowdown and
#             the case's `tightenings >= 4` failed (0 hazards either way)
#   speed     the 5 % goal (LLVM against NVRTC): dsa-prefill 64K and knn-ip 1M under nvrtc, llvm, nvrtc
#             again (kernels compiled on the machine), one run; then the first tier's options
#             (-Ofc=max -split-compile=0) on dsa-prefill 64K (SPEED_FIRST=0 skips it: its
#             kernels take seconds a call there)
# Files under $OUT/llvm/, then $OUT/llvm-<steps>.tar.gz.
set -o pipefail
OUT=${OUT:-out}
O=$OUT/llvm
mkdir -p "$O"
bash "$(dirname "$0")/unpack_binaries.sh"
export LD_LIBRARY_PATH=$PWD/.gpu-kit:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_TEST_TOOL=$PWD/.gpu-kit/winnow  # the tool tests run the carried binary
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
note() { echo "$* (at $((SECONDS - t0)) s)" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$O/gpu.txt"
nproc > "$O/cores.txt"; lscpu | grep -i "model name" >> "$O/cores.txt"
TIGHTEN='"knn retrieval: a sample threshold too low*"'
for step in "$@"; do
  case $step in
  jit)
    for be in nvrtc llvm; do
      rm -rf /tmp/cj-$be
      WINNOW_CACHE_DIR=/tmp/cj-$be CUDA_CACHE_DISABLE=1 .gpu-kit/winnow compile --score relu_mh --heads 64 \
        --dim 128 --q-dtype fp8 --k-dtype fp8 --k 2048 --arch sm_90a --emit cubin -o /tmp/cj-$be.cubin \
        --backend $be --timings > "$O/timings-$be.txt" 2>&1
      note "compile --timings $be rc=$?"
    done
    timeout 300 .gpu-kit/winnow bench jit --kernels relu_mh,softplus --backends nvrtc,llvm --fast-first \
      > "$O/jit.jsonl" 2> "$O/jit.txt"
    note "bench jit rc=$?"
    ;;
  knn)
    WINNOW_CACHE_DIR=/tmp/c-knn WINNOW_TEST_CACHE_DIR=/tmp/c-knn timeout ${KT:-300} .gpu-kit/winnow_tests \
      "[gpu][knn]" -r console --durations yes > "$O/knn-nvrtc.txt" 2>&1
    note "[gpu][knn] under nvrtc rc=$? :: $(grep -E 'All tests passed|test cases:' "$O/knn-nvrtc.txt" | tail -n 1)"
    ;;
  sanitize)
    export WINNOW_TEST_SMALL=1
    (WINNOW_CACHE_DIR=/tmp/c-mem WINNOW_TEST_CACHE_DIR=/tmp/c-mem timeout ${ST:-280} "$SAN" --tool memcheck \
       --print-limit 100 .gpu-kit/winnow_tests "[gpu][knn]" -r console > "$O/memcheck-knn-nvrtc.txt" 2>&1
     note "memcheck [gpu][knn] nvrtc rc=$?") &
    (WINNOW_NVRTC_OPTIONS=-DWINNOW_KNN_TIGHTEN_SPIN=4000000 WINNOW_CACHE_DIR=/tmp/c-race \
       WINNOW_TEST_CACHE_DIR=/tmp/c-race timeout ${ST:-280} "$SAN" --tool racecheck \
       --racecheck-report hazard --print-limit 100 .gpu-kit/winnow_tests \
       "$TIGHTEN,knn retrieval: ip*" -r console > "$O/racecheck-knn-nvrtc.txt" 2>&1
     note "racecheck knn nvrtc rc=$?") &
    (WINNOW_BACKEND=llvm WINNOW_CACHE_DIR=/tmp/c-mem-llvm WINNOW_TEST_CACHE_DIR=/tmp/c-mem-llvm timeout ${ST:-280} \
       "$SAN" --tool memcheck --print-limit 100 .gpu-kit/winnow_tests "$TIGHTEN" -r console \
       > "$O/memcheck-tighten-llvm.txt" 2>&1
     note "memcheck tightening llvm rc=$?") &
    wait
    grep -HE "ERROR SUMMARY|RACECHECK SUMMARY|test cases:|All tests passed" "$O"/*check*.txt | tee -a "$O/summary.txt"
    ;;
  speed)
    for run in "nvrtc" "llvm" "nvrtc again"; do
      be=${run%% *}
      for r in "dsa-prefill --T 64K" "knn-ip --T 1M --k 128,8192"; do
        WINNOW_BACKEND=$be WINNOW_CACHE_DIR=/tmp/c-speed-$be timeout 130 .gpu-kit/winnow bench $r --no-tuned \
          >> "$O/speed.jsonl" 2>> "$O/speed.txt"
        note "bench $run $r rc=$?"
      done
    done
    if [ "${SPEED_FIRST:-1}" != 0 ]; then
      WINNOW_NVRTC_OPTIONS="-Ofc=max -split-compile=0" WINNOW_CACHE_DIR=/tmp/c-speed-first timeout 100 \
        .gpu-kit/winnow bench dsa-prefill --T 64K --no-tuned > "$O/first-tier.jsonl" 2> "$O/first-tier.txt"
      note "bench of the first tier's options, dsa-prefill 64K, rc=$?"
    fi
    ;;
  *) echo "unknown step $step"; exit 2 ;;
  esac
done
name=llvm-$(IFS=-; echo "$*")
tar -C "$OUT" -czf "$OUT/$name.tar.gz" llvm && rm -rf "$O"
echo "gpu_llvm: files in $OUT/$name.tar.gz"
