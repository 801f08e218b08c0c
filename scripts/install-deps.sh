#!/usr/bin/env bash
# Installs the apt packages winnow builds with. The CUDA toolkit (NVRTC and cuda.h) is
# expected in /usr/local/cuda already; no GPU or driver is needed to build or test.
set -euo pipefail

# clang and libclang-rt-14-dev (libFuzzer, ASan, UBSan runtimes; only a Recommends of
# clang, which --no-install-recommends skips): the fuzz target, scripts/fuzz.sh.
# pkg-config: the install_consumers test builds a C program with `pkg-config --libs winnow`.
# python3-venv: the Python tests' virtual environment (.venv, below).
# libsqlite3-dev: the tuning database (runtime/tuning_db.cpp).
# llvm-19-dev, libclang-cpp19-dev, libclang-19-dev (clang's headers and static libraries,
# which -DWINNOW_LLVM_STATIC=ON links), clang-19: the LLVM backend (libwinnow_llvm.so:
# clang 19 as a library, LLVM's NVPTX target; clang-19's CUDA wrapper headers are embedded
# into the module at build time). Debian 12 (bookworm) has them in main; without them the
# build leaves the backend out (WINNOW_LLVM=AUTO) and NVRTC serves alone.
packages=(g++ cmake ninja-build libfmt-dev catch2 libssl-dev libsqlite3-dev pkg-config clang
          libclang-rt-14-dev python3 python3-venv llvm-19-dev libclang-cpp19-dev libclang-19-dev
          clang-19)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"

# The Python package's build and tests (scripts/test-python.sh): a virtual environment in
# .venv with scikit-build-core (pip install --no-build-isolation .), pytest and torch (the
# default PyPI wheel: about 5 GB with its CUDA wheels, a minute or two to install).
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements-test.txt
