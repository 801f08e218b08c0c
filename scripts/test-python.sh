#!/usr/bin/env bash
# The Python package: `pip install .` into .venv (scikit-build-core builds the library in
# build-py/), then pytest over python/tests against the installed package (the [gpu] cases
# are skipped, visibly, without a GPU) and the examples (which compile only, without one).
# .venv comes from scripts/install-deps.sh; without it the step says so and is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  echo "python: SKIPPED - no .venv (scripts/install-deps.sh makes it)"
  exit 0
fi
mkdir -p build-py
echo "python: pip install . (log: build-py/pip-install.log)"
if ! CMAKE_BUILD_PARALLEL_LEVEL=2 .venv/bin/python -m pip install --no-build-isolation --no-deps \
    --disable-pip-version-check . > build-py/pip-install.log 2>&1; then
  tail -n 40 build-py/pip-install.log
  echo "python: pip install . FAILED"
  exit 1
fi
# From outside the tree, so that `import winnow` is the installed package.
cd build-py
../.venv/bin/python -c 'import winnow; print("python: winnow", winnow.__version__, "from", winnow.library_path())'
../.venv/bin/python -m pytest -c ../pyproject.toml --rootdir=.. ../python/tests -rs -q -p no:cacheprovider
for example in ../examples/vllm_prefill.py ../examples/sglang_ragged.py ../examples/sharded_knn.py; do
  echo "python: $example"
  ../.venv/bin/python "$example"
done
