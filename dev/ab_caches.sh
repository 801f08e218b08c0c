#!/usr/bin/env bash
# On the CPU machine: compiles every build's kernels for dev/gpu_ab.sh's RUNS (sm_90a,
# `winnow bench ... --compile-only`, each build under its NVRTC options) into
# .gpu-kit/ab-caches.tar.gz, so that the GPU call compiles nothing. The builds' binaries are
# the kit's (dev/pack_binaries.sh), unpacked into a temporary folder, not into .gpu-kit/
# (the carry is 64 MiB). Same BUILDS and RUNS as dev/gpu_ab.sh:
#
#   BUILDS='base|.gpu-kit/base/winnow|;new|.gpu-kit/winnow|' \
#   RUNS='dsa-prefill --T 64K;dsa-glm --T 256K' bash dev/ab_caches.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bash dev/unpack_binaries.sh "$tmp"
IFS=';' read -r -a builds <<< "${BUILDS:?BUILDS: tag|binary|options;...}"
IFS=';' read -r -a runs <<< "${RUNS:?RUNS: bench arguments;...}"
for b in "${builds[@]}"; do
  IFS='|' read -r tag bin opts <<< "$b"
  exe=$tmp/$bin; [ -x "$exe" ] || exe=$bin
  for run in "${runs[@]}"; do
    # shellcheck disable=SC2086
    WINNOW_NVRTC_OPTIONS="$opts" WINNOW_CACHE_DIR=$tmp/cab/$tag LD_LIBRARY_PATH=$tmp/.gpu-kit \
      "$exe" bench $run --no-tuned --compile-only > "$tmp/log" 2>&1 ||
      { tail -n 5 "$tmp/log"; echo "ab_caches: $tag $run failed" >&2; exit 1; }
  done
  echo "ab_caches: $tag: $(find "$tmp/cab/$tag" -type f | wc -l) files"
done
tar -C "$tmp/cab" -czf .gpu-kit/ab-caches.tar.gz .
echo "ab_caches: .gpu-kit/ab-caches.tar.gz ($(du -k .gpu-kit/ab-caches.tar.gz | cut -f1) KB)"
