#!/usr/bin/env bash
# Installs the apt packages winnow builds with. The CUDA toolkit (NVRTC and cuda.h) is
# expected in /usr/local/cuda already; no GPU or driver is needed to build or test.
set -euo pipefail

packages=(g++ cmake ninja-build libfmt-dev catch2 libssl-dev)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
