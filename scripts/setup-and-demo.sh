#!/usr/bin/env bash
# A fresh machine to a running demo: apt packages, build, `winnow demo`. With a GPU the
# demo times the fused top-k against materialize + exact top-k (torch.topk when python3 has
# torch with CUDA) and checks their results agree; with none it compiles the kernel for
# sm_90a, prints its plan and runs the CPU reference only.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
./scripts/build.sh
build/winnow demo
