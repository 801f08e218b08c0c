#!/usr/bin/env python3
"""Plots `winnow bench` records (JSONL) as time against size, one PNG per workload.

    python3 bench/plot.py RUN.jsonl [RUN2.jsonl ...] [-o OUTDIR] [--workload NAME ...]

Each record is one JSON object per line with at least "workload", "impl", "params" and
"ms_median" (docs/performance.md describes the format). The size on the x axis is the
first of params T, N, L or S that the record holds; both axes are logarithmic. Every impl
("winnow", "materialize", "torch", "materialize+torch.topk", ...) is one line; the floor
is the "floor" records when the run wrote them, else the winnow records' "floor_ms".
Records whose other parameters differ (knn's k, block-select's input) go to separate
panels of the workload's figure. When several records share a panel, impl and size, the
last one in the input wins (a rerun replaces the first try).

Writes OUTDIR/<workload>.png (OUTDIR defaults to the current folder) and prints each
path. Needs matplotlib (pip install matplotlib); the parsing (load_records, panels) does
not. A line that is not a JSON object, or lacks a field above, stops the run with the
file and line number.
"""
import argparse
import json
import math
import os
import sys

SIZE_KEYS = ("T", "N", "L", "S")
REQUIRED = ("workload", "impl", "params", "ms_median")
# Fixed colours, so that an impl looks the same in every figure.
STYLE = {
    "winnow": dict(color="tab:blue", marker="o"),
    "materialize": dict(color="tab:orange", marker="s"),
    "materialize+torch.topk": dict(color="tab:red", marker="^"),
    "torch": dict(color="tab:green", marker="D"),
    "winnow-dense": dict(color="tab:purple", marker="v"),
    "floor": dict(color="black", marker="", linestyle="--"),
}
# Parameters that describe the measurement, not the problem: they never split panels.
NOT_PROBLEM = {"commit", "gpu", "date"}


class PlotError(Exception):
    pass


def load_records(paths):
    """Every record of the files, in order, each with "_size_key" and "_size" added."""
    records = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError as e:
            raise PlotError(f"{path}: cannot read: {e.strerror}") from None
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{n}"
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise PlotError(f"{where}: not JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(r, dict):
                raise PlotError(f"{where}: a JSON {type(r).__name__}, expected an object")
            missing = [k for k in REQUIRED if k not in r]
            if missing:
                raise PlotError(f"{where}: no {', '.join(missing)} in the record")
            if not isinstance(r["params"], dict):
                raise PlotError(f"{where}: params is not an object")
            key = next((k for k in SIZE_KEYS if k in r["params"]), None)
            if key is None:
                raise PlotError(f"{where}: params holds none of {', '.join(SIZE_KEYS)}")
            size, ms = r["params"][key], r["ms_median"]
            if not _positive(size) or not _positive(ms):
                raise PlotError(f"{where}: params.{key} = {size!r} and ms_median = {ms!r} "
                                "must be positive numbers")
            floor = r.get("floor_ms")
            if floor is not None and not _positive(floor):
                raise PlotError(f"{where}: floor_ms = {floor!r} is not a positive number")
            r["_size_key"], r["_size"] = key, size
            records.append(r)
    if not records:
        raise PlotError(f"no records in {', '.join(paths)}")
    return records


def _positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def panels(records):
    """{workload: {panel label: {impl: {size: ms}}}}, the floor included as impl "floor"."""
    out = {}
    for w in dict.fromkeys(r["workload"] for r in records):
        rows = [r for r in records if r["workload"] == w]
        # The problem parameters that take more than one value in this workload split it.
        names = sorted({k for r in rows for k in r["params"]} - set(SIZE_KEYS) - NOT_PROBLEM)
        varying = [k for k in names if len({json.dumps(r["params"].get(k)) for r in rows}) > 1]
        # The floor: the run's "floor" records, else the others' floor_ms.
        has_floor = any(r["impl"] == "floor" for r in rows)
        # A record without one of them, or with null (block-select's dense baselines: alpha)
        # joins every panel that agrees with it on the others.
        def value(r, k):
            v = r["params"].get(k)
            return None if v is None else json.dumps(v)

        full = list(dict.fromkeys(tuple(value(r, k) for k in varying) for r in rows
                                  if all(r["params"].get(k) is not None for k in varying)))
        by_panel = {}
        for r in rows:
            mine = tuple(value(r, k) for k in varying)
            keys = [f for f in full if all(m is None or m == v for m, v in zip(mine, f))] or [mine]
            for key in keys:
                label = ", ".join(f"{k} = {json.loads(v) if v else '-'}"
                                  for k, v in zip(varying, key)) or w
                lines = by_panel.setdefault(label, {})
                lines.setdefault(r["impl"], {})[r["_size"]] = r["ms_median"]
                if r["impl"] != "floor" and r.get("floor_ms") and not has_floor:
                    lines.setdefault("floor", {}).setdefault(r["_size"], r["floor_ms"])
        out[w] = by_panel
    return out


def size_label(v):
    for div, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if v >= div and v % div == 0:
            return f"{v // div}{suffix}"
    return f"{v:g}"


def plot(records, outdir, workloads=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    os.makedirs(outdir, exist_ok=True)
    written = []
    for w, by_panel in panels(records).items():
        if workloads and w not in workloads:
            continue
        size_key = next(r["_size_key"] for r in records if r["workload"] == w)
        n = len(by_panel)
        cols = min(n, 2)
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
        for ax, (label, lines) in zip(axes.flat, by_panel.items()):
            sizes = sorted({s for pts in lines.values() for s in pts})
            for impl in sorted(lines, key=lambda i: (i != "winnow", i == "floor", i)):
                pts = sorted(lines[impl].items())
                style = STYLE.get(impl, dict(marker="x"))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=impl, **style)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(FixedLocator(sizes))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
            if len(sizes) == 1:
                ax.set_xlim(sizes[0] / 2, sizes[0] * 2)
            ax.set_xlabel(size_key)
            ax.set_ylabel("ms (median)")
            ax.set_title(label if label != w else w, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        mine = [r for r in records if r["workload"] == w]
        sub = " ".join(", ".join(dict.fromkeys(str(r[k]) for r in mine if r.get(k)))
                       for k in ("gpu", "commit", "date"))
        fig.suptitle(f"winnow bench {w}" + (f"\n{sub}" if sub.strip() else ""), fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.97 if rows > 1 else 0.93))
        path = os.path.join(outdir, f"{w}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    if workloads and not written:
        have = ", ".join(dict.fromkeys(r["workload"] for r in records))
        raise PlotError(f"no records of {', '.join(workloads)}; the files hold {have}")
    return written


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="JSONL files written by winnow bench --out")
    ap.add_argument("-o", "--outdir", default=".", help="where the PNGs go [.]")
    ap.add_argument("--workload", action="append", help="plot only this workload (repeatable)")
    a = ap.parse_args(argv)
    try:
        records = load_records(a.files)
        for path in plot(records, a.outdir, a.workload):
            print(path)
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"plot.py: {e} (pip install matplotlib)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
