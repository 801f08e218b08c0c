#!/usr/bin/env bash
# Installs the apt packages winnow builds with. The CUDA toolkit (NVRTC and cuda.h) is
# expected in /usr/local/cuda already; no GPU or driver is needed to build or test.
set -euo pipefail

# clang and libclang-rt-14-dev (libFuzzer, ASan, UBSan runtimes; only a Recommends of
# clang, which --no-install-recommends skips): the fuzz target, scripts/fuzz.sh.
# pkg-config: the install_consumers test builds a C program with `pkg-config --libs winnow`.
packages=(g++ cmake ninja-build libfmt-dev catch2 libssl-dev pkg-config clang libclang-rt-14-dev)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
