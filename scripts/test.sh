#!/usr/bin/env bash
# Builds if needed, then runs every test. [gpu] tests are reported as skipped where there
# is no GPU; everything else runs anywhere. Then the Python package (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/build.sh
ctest --test-dir build --output-on-failure -j2
./scripts/test-python.sh
