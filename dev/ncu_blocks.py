#!/usr/bin/env python3
"""Where a kernel's instructions and stalls go, from Nsight Compute's source page.

Reads the CSV of `ncu --import R.ncu-rep --page source --csv --print-source sass` (one
section per profiled kernel, each starting with a "Kernel Name" line) and prints, per
kernel, its instructions executed and stall samples, the opcodes that take the most of
them, and its blocks: runs of consecutive SASS instructions with the same execution count
(a loop body, a branch's path), the largest first. An instruction's line number in the
section is printed, so that `--lines A-B` can list that range with its counts.

    python3 dev/ncu_blocks.py sass.csv [--top N] [--lines A-B] [--kernel I]
"""
import argparse
import collections
import csv
import sys


def kernels_of(path):
    kernels, header = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                kernels.append((row[1] if len(row) > 1 else "?", []))
                header = None
            elif row[0] == "Address":
                header = row
            elif header is not None and kernels:
                kernels[-1][1].append(dict(zip(header, row)))
    return kernels


def count(row, field):
    try:
        return int(row.get(field) or 0)
    except ValueError:
        return 0


EXEC = "Instructions Executed"
STALL = "Warp Stall Sampling (All Samples)"


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12, help="blocks and opcodes listed [12]")
    ap.add_argument("--lines", help="list these instructions (A-B) of the kernel")
    ap.add_argument("--kernel", type=int, help="only this kernel (0 = the first)")
    a = ap.parse_args()
    kernels = kernels_of(a.csv)
    if not kernels:
        sys.exit(f"{a.csv}: no 'Kernel Name' section (the source page's CSV is expected)")
    for i, (name, rows) in enumerate(kernels):
        if a.kernel is not None and i != a.kernel:
            continue
        total = sum(count(r, EXEC) for r in rows) or 1
        stalls = sum(count(r, STALL) for r in rows) or 1
        print(f"kernel {i} ({name}): {total} warp instructions executed, {stalls} stall samples")
        if a.lines:
            lo, hi = (int(x) for x in a.lines.split("-"))
            for n in range(lo, min(hi, len(rows) - 1) + 1):
                r = rows[n]
                print(f"{n:6d} {count(r, EXEC):>12d} {count(r, STALL):>8d}  {r.get('Source', '').strip()}")
            continue
        ops_e, ops_s = collections.Counter(), collections.Counter()
        blocks, cur = [], None
        for n, r in enumerate(rows):
            e, s, op = count(r, EXEC), count(r, STALL), opcode(r.get("Source", ""))
            ops_e[op] += e
            ops_s[op] += s
            if cur is None or e != cur["exec"]:
                cur = {"line": n, "exec": e, "n": 0, "stall": 0, "ops": collections.Counter()}
                blocks.append(cur)
            cur["n"] += 1
            cur["stall"] += s
            cur["ops"][op] += 1
        print("  opcodes: " + ", ".join(
            f"{op} {100 * ops_e[op] / total:.1f} % / {100 * ops_s[op] / stalls:.1f} % stalls"
            for op, _ in ops_s.most_common(a.top)))
        for b in sorted(blocks, key=lambda b: -b["exec"] * b["n"])[: a.top]:
            mix = ", ".join(f"{op} x{k}" for op, k in b["ops"].most_common(5))
            print(f"  line {b['line']:6d}: {b['n']:4d} instructions x {b['exec']:>11d} = "
                  f"{100 * b['exec'] * b['n'] / total:5.1f} % of instructions, "
                  f"{100 * b['stall'] / stalls:5.1f} % of stall samples; {mix}")


if __name__ == "__main__":
    main()
