#!/usr/bin/env bash
# Builds the torch extension libwinnow_torch.so (python/winnow/_ext/torch_ops.cpp) from the
# source tree against the torch of $PYTHON (default python3), with no network: CMake (Ninja
# when there is one) over python/winnow/_ext/CMakeLists.txt, linked with a libwinnow.so.0
# built before. Writes <out-dir>/libwinnow_torch.so and a copy of the libwinnow.so.0 it is
# linked with beside it (its RUNPATH is $ORIGIN), and prints the time it took.
#   bash dev/build_torch_ext.sh <out-dir> [libwinnow.so.0]   (default .gpu-kit/libwinnow.so.0)
# Then: WINNOW_LIBRARY=<out-dir>/libwinnow.so.0 WINNOW_TORCH_EXT=<out-dir>/libwinnow_torch.so.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: dev/build_torch_ext.sh <out-dir> [libwinnow.so.0]}
lib=${2:-$PWD/.gpu-kit/libwinnow.so.0}
python=${PYTHON:-python3}
start=$(date +%s.%N)
[ -f "$lib" ] || { echo "build_torch_ext: $lib missing (build the C library first)"; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cuda_root=()
if ! command -v nvcc >/dev/null 2>&1 && [ -d /usr/local/cuda ]; then
  cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
fi
work=$out/cmake-torch-ext
cmake -S python/winnow/_ext -B "$work" "${generator[@]}" "${cuda_root[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DWINNOW_LIBRARY="$lib" -DPython_EXECUTABLE="$(command -v "$python")" > "$work.configure.log" 2>&1 \
  || { cat "$work.configure.log"; exit 1; }
grep "winnow:" "$work.configure.log" || true
cmake --build "$work" -j "$(nproc)"
cp "$work/libwinnow_torch.so" "$out/libwinnow_torch.so"
[ "$lib" -ef "$out/libwinnow.so.0" ] || cp -L "$lib" "$out/libwinnow.so.0"
end=$(date +%s.%N)
echo "build_torch_ext: $out/libwinnow_torch.so in $(python3 -c "print(f'{$end - $start:.1f}')") s"
