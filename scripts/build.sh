#!/usr/bin/env bash
# Configures (once) and builds winnow in build/ (Ninja, Release). Extra arguments go to
# the first CMake configure, e.g. -DCUDAToolkit_ROOT=/opt/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f build/CMakeCache.txt ]; then
  cuda_root=()
  if ! command -v nvcc >/dev/null 2>&1 && [ -d /usr/local/cuda ]; then
    cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_root[@]}" "$@"
fi
cmake --build build
