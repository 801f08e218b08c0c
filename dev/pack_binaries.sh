#!/usr/bin/env bash
# Fills .gpu-kit/ on the CPU machine: the binaries a GPU machine runs (it builds nothing),
# carried there as an ignored folder (the device tool's carry: [".gpu-kit"]).
#   .gpu-kit/{winnow,winnow_tests,winnow_c_two_contexts,libwinnow.so.0}
#                                            the checked-out commit's build
#   .gpu-kit/base/winnow                     with BASE=<ref>: that commit's winnow, for
#                                            dev/gpu_compare.sh bench (base against this build)
#   .gpu-kit/<name>/winnow                   wrappers: this build under one environment
#                                            setting each (WRAP="name:NAME=VALUE ...")
#   .gpu-kit/libwinnow_llvm.so               the llvm backend linked statically
#                                            (-DWINNOW_LLVM_STATIC=ON): it compiles there
#   .gpu-kit/llvm-cache.tar.gz               the llvm step's kernels, compiled here with
#                                            WINNOW_BACKEND=llvm
#   .gpu-kit/llvm-suite-cache.tar.gz         with RECORDS="FILE.tar.gz ..." (the records/ folder
#                                            of a `dev/gpu_compare.sh suites` run): those requests
#                                            compiled with --backend llvm (about 5 min; the
#                                            NVRTC-only first tier's records fail, and its case
#                                            skips under llvm); else kept when present
# Every binary is stripped and xz-compressed (dev/unpack_binaries.sh unpacks them on the GPU
# machine): the tree and the kit travel in 64 MiB.
#
#   bash dev/pack_binaries.sh
#   BASE=main bash dev/pack_binaries.sh                      # also main's winnow in base/
#   WRAP="p1:WINNOW_PAGED_WG_PAGES=1" bash dev/pack_binaries.sh
#   NO_LLVM=1 bash dev/pack_binaries.sh                      # without the llvm cache
#   NO_LLVM_MODULE=1 bash dev/pack_binaries.sh               # without the static llvm module
#   RECORDS=records.tar.gz bash dev/pack_binaries.sh           # a tar.gz holding records/
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "pack_binaries: the tree has uncommitted changes; commit or stash them first" >&2
  exit 1
fi
WRAP=${WRAP:-}
step() { echo "pack_binaries: $* ($(date +%H:%M:%S))"; }
# The branch (or commit) to come back to after building BASE.
here=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)

# Everything else in .gpu-kit is replaced; the suite's llvm cache (made from a run's
# records, dev/gpu_compare.sh suites-llvm) is kept.
keep=/tmp/pack-binaries-llvm-suite-cache.tar.gz
rm -f "$keep"
[ -f .gpu-kit/llvm-suite-cache.tar.gz ] && mv .gpu-kit/llvm-suite-cache.tar.gz "$keep"
rm -rf .gpu-kit && mkdir -p .gpu-kit
[ -f "$keep" ] && mv "$keep" .gpu-kit/llvm-suite-cache.tar.gz

if [ -n "${BASE:-}" ]; then
  git checkout -q --detach "$BASE"
  step "building the base ($BASE, $(git rev-parse --short HEAD))"
  ./scripts/build.sh > /tmp/pack-binaries-base.log 2>&1 || {
    tail -n 20 /tmp/pack-binaries-base.log; git checkout -q "$here"; exit 1; }
  mkdir -p .gpu-kit/base && cp build/winnow .gpu-kit/base/winnow && strip .gpu-kit/base/winnow
  git checkout -q "$here"
fi
step "building $(git rev-parse --short HEAD)"
./scripts/build.sh > /tmp/pack-binaries.log 2>&1 || { tail -n 20 /tmp/pack-binaries.log; exit 1; }
for f in winnow winnow_tests winnow_c_two_contexts; do cp build/$f .gpu-kit/$f && strip .gpu-kit/$f; done
cp -L build/libwinnow.so.0 .gpu-kit/libwinnow.so.0 && strip --strip-unneeded .gpu-kit/libwinnow.so.0

for w in $WRAP; do
  name=${w%%:*} setting=${w#*:}
  mkdir -p .gpu-kit/$name
  printf '#!/bin/sh\n# this build with %s\n%s exec "$(dirname "$0")/../winnow" "$@"\n' \
    "$setting" "$setting" > .gpu-kit/$name/winnow
  chmod +x .gpu-kit/$name/winnow
done

if [ "${NO_LLVM_MODULE:-0}" != 1 ]; then
  # The llvm backend linked against LLVM's static libraries, so that it compiles on the GPU
  # machine, which has no LLVM.
  step "the static llvm module"
  { cmake -S . -B /tmp/winnow-build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DWINNOW_LLVM=ON \
      -DWINNOW_LLVM_STATIC=ON -DWINNOW_BUILD_TESTS=OFF -DWINNOW_TORCH_EXTENSION=OFF &&
    cmake --build /tmp/winnow-build-static --target winnow_llvm; } > /tmp/pack-binaries-static.log 2>&1 || {
    tail -n 20 /tmp/pack-binaries-static.log; exit 1; }
  strip --strip-unneeded -o .gpu-kit/libwinnow_llvm.so /tmp/winnow-build-static/libwinnow_llvm.so
fi
if [ "${NO_LLVM:-0}" != 1 ]; then
  step "the llvm step's kernels"
  rm -rf /tmp/llvmcache
  for w in "dsa-prefill --T 64K" "knn-ip --T 1M --k 128,8192"; do
    # shellcheck disable=SC2086  # the workload's words are separate arguments
    WINNOW_CACHE_DIR=/tmp/llvmcache WINNOW_BACKEND=llvm build/winnow bench $w --compile-only > /dev/null
  done
  tar -C /tmp -czf .gpu-kit/llvm-cache.tar.gz llvmcache
fi
if [ -n "${RECORDS:-}" ]; then
  # The sources in the records are the generated ones; the templates and the build id come
  # from this build, so the keys are the ones this build's tests ask for.
  step "the suite's kernels under llvm from $RECORDS"
  rm -rf /tmp/pack-binaries-records /tmp/c-llvm-suite && mkdir -p /tmp/pack-binaries-records
  for r in $RECORDS; do tar -C /tmp/pack-binaries-records -xzf "$r"; done  # each holds records/
  build/winnow cache replay /tmp/pack-binaries-records/records --backend llvm --dir /tmp/c-llvm-suite \
    > /tmp/pack-binaries-replay.log 2>&1 || true
  grep -c FAILED /tmp/pack-binaries-replay.log | sed 's/^/pack_binaries: records that failed (the first tier fails under llvm): /'
  tar -C /tmp -czf .gpu-kit/llvm-suite-cache.tar.gz c-llvm-suite
fi
# The binaries travel xz-compressed (dev/unpack_binaries.sh on the GPU machine): the module
# alone is 75 MB.
step "compressing"
find .gpu-kit -type f \( -name winnow -o -name winnow_tests -o -name 'lib*.so*' \) -print0 |
  xargs -0 -n 1 xz -T2 -6 -f
size=$(du -sm .gpu-kit | cut -f1)
step ".gpu-kit holds ${size} MB"
if [ "$size" -gt 50 ]; then
  echo "pack_binaries: over 50 MB; with the tree that may pass the 64 MiB carry" >&2
  exit 1
fi
