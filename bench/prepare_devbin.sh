#!/usr/bin/env bash
# Fills .devbin/ on the CPU machine for a visit of bench/visit_pending.sh (carry [".devbin"]):
#   .devbin/main/winnow                      main's build (when patches are pending)
#   .devbin/libwinnow_llvm.so                the llvm backend linked statically
#                                            (-DWINNOW_LLVM_STATIC=ON): it compiles there
#   (each binary xz-compressed: bench/devbin_unpack.sh unpacks them on the GPU machine)
#   .devbin/{winnow,winnow_tests,winnow_c_two_contexts,libwinnow.so.0}
#                                            the pending build: main + bench/pending/*.patch,
#                                            applied on the branch `pending` (recreated)
#   .devbin/<name>/winnow                    wrappers: the pending build under one
#                                            environment switch each (WRAP, below)
#   .devbin/llvm-cache.tar.gz                the llvm step's kernels, compiled here by the
#                                            pending build with WINNOW_BACKEND=llvm
#   .devbin/llvm-suite-cache.tar.gz          with RECORDS="FILE.tar.gz ..." (a suites step's records/
#                                            folder, e.g. bench/results/2026-12-05-s30-suite-
#                                            compile-records.tar.gz): those requests compiled by
#                                            the pending build with --backend llvm (about 5 min;
#                                            the NVRTC-only first tier's records fail, and their
#                                            case skips under llvm); else kept when present
# Every binary is stripped: the tree and .devbin travel in 64 MiB. Leaves main checked out.
#
#   bash bench/prepare_devbin.sh
#   WRAP="p1:WINNOW_PAGED_WG_PAGES=1 nopf:WINNOW_PAGED_PREFETCH=0" bash bench/prepare_devbin.sh
#   NO_LLVM=1 bash bench/prepare_devbin.sh   # without the llvm cache
#   NO_LLVM_MODULE=1 bash bench/prepare_devbin.sh   # without the static llvm module
#   RECORDS=bench/results/2026-12-05-s30-suite-compile-records.tar.gz bash bench/prepare_devbin.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "prepare_devbin: the tree has uncommitted changes; commit or stash them first" >&2
  exit 1
fi
WRAP=${WRAP:-"p1:WINNOW_PAGED_WG_PAGES=1 nopf:WINNOW_PAGED_PREFETCH=0 pf8:WINNOW_PAGED_PREFETCH=8 pf16:WINNOW_PAGED_PREFETCH=16 c3:WINNOW_PAGED_STREAM_CTAS=3"}
step() { echo "prepare_devbin: $* ($(date +%H:%M:%S))"; }

git checkout -q main
step "building main"
./scripts/build.sh > /tmp/prepare-devbin-main.log 2>&1 || { tail -n 20 /tmp/prepare-devbin-main.log; exit 1; }
# Everything else in .devbin is replaced; the suite's llvm cache (made from a visit's
# records, bench/visit_pending.sh suites-llvm) is kept.
keep=/tmp/prepare-devbin-llvm-suite-cache.tar.gz
rm -f "$keep"
[ -f .devbin/llvm-suite-cache.tar.gz ] && mv .devbin/llvm-suite-cache.tar.gz "$keep"
rm -rf .devbin && mkdir -p .devbin
[ -f "$keep" ] && mv "$keep" .devbin/llvm-suite-cache.tar.gz

patches=(bench/pending/*.patch)
if [ -e "${patches[0]}" ]; then
  mkdir -p .devbin/main && cp build/winnow .devbin/main/winnow && strip .devbin/main/winnow
  git checkout -q -B pending main
  git am -k -q "${patches[@]}" || { git am --abort; git checkout -q main; echo "prepare_devbin: the patches do not apply" >&2; exit 1; }
  step "building pending ($(git rev-list --count main..pending) commits on main)"
  ./scripts/build.sh > /tmp/prepare-devbin-pending.log 2>&1 || {
    tail -n 20 /tmp/prepare-devbin-pending.log; git checkout -q main; exit 1; }
else
  step "no pending patches: the pending build is main's"
fi
for f in winnow winnow_tests winnow_c_two_contexts; do cp build/$f .devbin/$f && strip .devbin/$f; done
cp -L build/libwinnow.so.0 .devbin/libwinnow.so.0 && strip --strip-unneeded .devbin/libwinnow.so.0

for w in $WRAP; do
  name=${w%%:*} setting=${w#*:}
  mkdir -p .devbin/$name
  printf '#!/bin/sh\n# the pending build with %s\n%s exec "$(dirname "$0")/../winnow" "$@"\n' \
    "$setting" "$setting" > .devbin/$name/winnow
  chmod +x .devbin/$name/winnow
done

if [ "${NO_LLVM_MODULE:-0}" != 1 ]; then
  # The llvm backend linked against LLVM's static libraries, so that it compiles on the GPU
  # machine, which has no LLVM (the tree's sources at this point: the pending build's).
  step "the static llvm module"
  { cmake -S . -B /tmp/winnow-build-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DWINNOW_LLVM=ON \
      -DWINNOW_LLVM_STATIC=ON -DWINNOW_BUILD_TESTS=OFF -DWINNOW_TORCH_EXTENSION=OFF &&
    cmake --build /tmp/winnow-build-static --target winnow_llvm; } > /tmp/prepare-devbin-static.log 2>&1 || {
    tail -n 20 /tmp/prepare-devbin-static.log; git checkout -q main; exit 1; }
  strip --strip-unneeded -o .devbin/libwinnow_llvm.so /tmp/winnow-build-static/libwinnow_llvm.so
fi
if [ "${NO_LLVM:-0}" != 1 ]; then
  step "the llvm step's kernels"
  rm -rf /tmp/llvmcache
  for w in "dsa-prefill --T 64K" "knn-ip --T 1M --k 128,8192"; do
    # shellcheck disable=SC2086  # the workload's words are separate arguments
    WINNOW_CACHE_DIR=/tmp/llvmcache WINNOW_BACKEND=llvm build/winnow bench $w --compile-only > /dev/null
  done
  tar -C /tmp -czf .devbin/llvm-cache.tar.gz llvmcache
fi
if [ -n "${RECORDS:-}" ]; then
  # The sources in the records are the generated ones; the templates and the build id come
  # from this build, so the keys are the ones the pending build's tests ask for.
  step "the suite's kernels under llvm from $RECORDS"
  rm -rf /tmp/prepare-devbin-records /tmp/c-llvm-suite && mkdir -p /tmp/prepare-devbin-records
  for r in $RECORDS; do tar -C /tmp/prepare-devbin-records -xzf "$r"; done  # each holds records/
  build/winnow cache replay /tmp/prepare-devbin-records/records --backend llvm --dir /tmp/c-llvm-suite \
    > /tmp/prepare-devbin-replay.log 2>&1 || true
  grep -c FAILED /tmp/prepare-devbin-replay.log | sed 's/^/prepare_devbin: records that failed (the first tier fails under llvm): /'
  tar -C /tmp -czf .devbin/llvm-suite-cache.tar.gz c-llvm-suite
fi
git checkout -q main
# The binaries travel xz-compressed (bench/devbin_unpack.sh on the GPU machine): the module
# alone is 75 MB.
step "compressing"
find .devbin -type f \( -name winnow -o -name winnow_tests -o -name 'lib*.so*' \) -print0 |
  xargs -0 -n 1 xz -T2 -6 -f
size=$(du -sm .devbin | cut -f1)
step ".devbin holds ${size} MB"
if [ "$size" -gt 50 ]; then
  echo "prepare_devbin: over 50 MB; with the tree that may pass the 64 MiB carry" >&2
  exit 1
fi
