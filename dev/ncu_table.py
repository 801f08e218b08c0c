#!/usr/bin/env python3
"""The side-by-side table of dev/gpu_profile_indexer.sh from Nsight Compute's raw CSVs.

    python3 dev/ncu_table.py deepgemm-64K.csv winnow-64K.csv ...

Each CSV is `ncu -i X.ncu-rep --page raw --csv`: a header of metric names, a row of units,
then one row per profiled kernel. A file named <impl>-<T>.csv is dsa-prefill at T keys, Q =
8192 queries; the winnow files hold two kernels, the materialize one first, the fused one
second. Prints one markdown row per kernel: time, instructions and issue cycles per
thousand (query, key) pairs, issue-slot and tensor-pipe use, registers, achieved occupancy,
the three largest stall reasons (warps stalled per issue). A metric this ncu version does
not report prints as "-".
"""
import csv
import os
import re
import sys

Q = 8192


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def first(row, *names):
    for n in names:
        if n in row and num(row[n]) is not None:
            return num(row[n])
    return None


def size(tok):
    m = re.fullmatch(r"(\d+)([KM]?)", tok)
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20}[m.group(2)]


def fmt(v, f="{:.2f}"):
    return "-" if v is None else f.format(v)


print("| kernel | T | ms | inst / 1K pairs | issue-active % | tensor pipe % | regs | occupancy % | top stalls (warps per issue) |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    base = os.path.basename(path)[:-4]
    impl, t = base.rsplit("-", 1)
    pairs = Q * size(t)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    units = rows[0] if rows else {}
    rows = [r for r in rows[1:] if r.get("Kernel Name")]  # rows[0]: the units
    for i, r in enumerate(rows):
        name = impl if impl != "winnow" else ("winnow materialize" if i == 0 else "winnow fused")
        ns = first(r, "gpu__time_duration.sum")
        inst = first(r, "smsp__inst_executed.sum", "sm__inst_executed.sum")
        issue = first(r, "smsp__issue_active.avg.pct_of_peak_sustained_active",
                      "sm__inst_issued.avg.pct_of_peak_sustained_active")
        tensor = first(r, "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                       "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                       "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active")
        regs = first(r, "launch__registers_per_thread")
        occ = first(r, "sm__warps_active.avg.pct_of_peak_sustained_active")
        stalls = []
        for k, v in r.items():
            m = re.fullmatch(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio", k or "")
            if m and num(v) is not None and m.group(1) not in ("selected",):
                stalls.append((num(v), m.group(1)))
        stalls.sort(reverse=True)
        top = ", ".join(f"{n} {v:.2f}" for v, n in stalls[:3]) or "-"
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3,
                 "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
        ms = None if ns is None else ns * scale.get(units.get("gpu__time_duration.sum", "nsecond"), 1e-6)
        print(f"| {name} | {t} | {fmt(ms, '{:.3f}')} | {fmt(None if inst is None else inst / pairs * 1000)} | "
              f"{fmt(issue, '{:.1f}')} | {fmt(tensor, '{:.1f}')} | {fmt(regs, '{:.0f}')} | {fmt(occ, '{:.1f}')} | {top} |")
