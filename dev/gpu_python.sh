#!/usr/bin/env bash
# The Python package on the lent GPU, straight from the source tree (no pip install: the
# machine has no network): python/ on PYTHONPATH, the C library prebuilt here and carried in
# .gpu-kit/libwinnow.so.0 (WINNOW_LIBRARY overrides). Every output under $OUT:
#   python_tests.txt / .xml  pytest over python/tests (the [gpu] cases and the rest)
#   python_overhead.json     host time of one op call over 1000 calls (dev/python_overhead.py)
#   python_examples.txt      examples/vllm_prefill.py and examples/sglang_ragged.py
#   python_summary.json      each step's exit status and the test counts
#   python_ext_build.txt     PY_EXT=1: the torch extension's build and its time
# Env: PY_TEST_TIMEOUT (s, default 420), PY_TESTS_K (a pytest -k expression), PY_CALLS.
# PY_EXT=1: first build the torch extension (the hot ops' C++ kernels) against the machine's
# torch with dev/build_torch_ext.sh into $PY_EXT_DIR (default /tmp/winnow-torch-ext) and
# point WINNOW_TORCH_EXT at it, so the tests run the C++ path (test_fast_ops.py compares it
# with the ctypes path) and python_overhead.json measures both paths. Without PY_EXT the ops
# take the ctypes path (unless WINNOW_TORCH_EXT names a built extension).
# Run alone (OUT=out bash dev/gpu_python.sh) or from dev/gpu_suite.sh with PY_TESTS=1.
set -o pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export WINNOW_CACHE_DIR=${WINNOW_CACHE_DIR:-/tmp/winnow-cache}
export WINNOW_LIBRARY=${WINNOW_LIBRARY:-$PWD/.gpu-kit/libwinnow.so.0}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
py_start=$SECONDS
if [ ! -f "$WINNOW_LIBRARY" ]; then
  echo "python: $WINNOW_LIBRARY missing: cp build/libwinnow.so.0 .gpu-kit/ first"
  echo '{"error": "no libwinnow.so.0"}' > "$OUT/python_summary.json"
  exit 1
fi
ext_rc=
if [ -n "${PY_EXT:-}" ]; then
  PY_EXT_DIR=${PY_EXT_DIR:-/tmp/winnow-torch-ext}
  bash dev/build_torch_ext.sh "$PY_EXT_DIR" "$WINNOW_LIBRARY" > "$OUT/python_ext_build.txt" 2>&1
  ext_rc=$?
  tail -n 5 "$OUT/python_ext_build.txt"
  echo "python extension build: rc=$ext_rc"
  if [ $ext_rc -eq 0 ]; then
    export WINNOW_TORCH_EXT=$PY_EXT_DIR/libwinnow_torch.so
  fi
fi
python3 -c 'import sys, torch, winnow; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), "winnow", winnow.__version__, winnow.library_path()); print("ops:", winnow.fast_ops_status())' 2>&1 | tee "$OUT/python_env.txt"

k_args=()
[ -n "${PY_TESTS_K:-}" ] && k_args=(-k "$PY_TESTS_K")
timeout "${PY_TEST_TIMEOUT:-420}" python3 -m pytest python/tests -rs -v -p no:cacheprovider \
  --junitxml="$OUT/python_tests.xml" "${k_args[@]}" > "$OUT/python_tests.txt" 2>&1
tests_rc=$?
tail -n 25 "$OUT/python_tests.txt"
echo "python tests: rc=$tests_rc ($((SECONDS - py_start)) s)"

timeout 180 python3 dev/python_overhead.py "$OUT/python_overhead.json" --calls "${PY_CALLS:-1000}" \
  > "$OUT/python_overhead.txt" 2>&1
overhead_rc=$?
cat "$OUT/python_overhead.txt" | tail -n 30
echo "python overhead: rc=$overhead_rc"

: > "$OUT/python_examples.txt"
examples_rc=0
for example in examples/vllm_prefill.py examples/sglang_ragged.py; do
  echo "== $example" >> "$OUT/python_examples.txt"
  timeout 180 python3 "$example" >> "$OUT/python_examples.txt" 2>&1 || examples_rc=$?
done
cat "$OUT/python_examples.txt"
echo "python examples: rc=$examples_rc"

python3 - "$OUT" "$tests_rc" "$overhead_rc" "$examples_rc" "${ext_rc:--1}" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
out, tests_rc, overhead_rc, examples_rc, ext_rc = sys.argv[1], *map(int, sys.argv[2:])
summary = {"tests_rc": tests_rc, "overhead_rc": overhead_rc, "examples_rc": examples_rc}
if ext_rc >= 0:  # PY_EXT=1
    summary["ext_build_rc"] = ext_rc
    log = open(f"{out}/python_ext_build.txt").read()
    built = re.search(r"libwinnow_torch\.so in ([0-9.]+) s", log)
    summary["ext_build_s"] = float(built.group(1)) if built else None
try:
    suite = ET.parse(f"{out}/python_tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    summary["tests"] = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
except Exception as e:  # a run killed by its timeout writes no XML
    summary["tests"] = f"no junit xml: {e}"
try:
    summary["overhead"] = json.load(open(f"{out}/python_overhead.json"))
except Exception as e:
    summary["overhead"] = f"no overhead json: {e}"
json.dump(summary, open(f"{out}/python_summary.json", "w"), indent=1)
print(json.dumps(summary)[:2000])
PY
echo "time: python $((SECONDS - py_start)) s"
[ $tests_rc -eq 0 ] && [ $overhead_rc -eq 0 ] && [ $examples_rc -eq 0 ] && [ "${ext_rc:-0}" -eq 0 ]
