#!/usr/bin/env bash
# A fresh machine to a running demo: apt packages, build, `winnow demo`. With no GPU the
# demo compiles the kernel for sm_90a and runs the CPU reference only.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
./scripts/build.sh
build/winnow demo
