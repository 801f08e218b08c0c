#!/usr/bin/env bash
# Unpacks what dev/pack_binaries.sh compressed in .gpu-kit (the carry is 64 MiB): each
# .gpu-kit/**/*.xz beside itself, executable, unless already unpacked. Python's lzma: the GPU
# machine may have no xz. Called by the dev/gpu_*.sh scripts; does nothing without .xz files.
# With a folder argument, into that folder instead (DIR/.gpu-kit/...), the kit left as it is
# (dev/ab_caches.sh on the CPU machine: unpacked, the kit would pass the carry's limit).
set -euo pipefail
python3 - "${1:-}" <<'PY'
import glob, lzma, os, shutil, sys
for f in glob.glob(".gpu-kit/**/*.xz", recursive=True):
    out = os.path.join(sys.argv[1], f[:-3]) if sys.argv[1] else f[:-3]
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(f):
        continue
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with lzma.open(f) as i, open(out + ".part", "wb") as o:
        shutil.copyfileobj(i, o)
    os.chmod(out + ".part", 0o755)
    os.replace(out + ".part", out)
PY
