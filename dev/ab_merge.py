"""One result file from a dev/gpu_ab.sh call: the engines' records first, then every build's
records with `build` (the tag), `build_commit` and `nvrtc_options` fields, and, on winnow's
and materialize's records of a workload the engines measured, `anchors`: each engine
record's time and winnow's ratio to it (below 1: winnow faster), as `winnow bench --anchors`
writes them. The engines ran after winnow in the same call, on the same GPU.

    python3 dev/ab_merge.py AB_DIR OUT.jsonl base=fb935d9 new=797f5df [--options q6=-DX=6]

AB_DIR is the unpacked `ab/` folder of $OUT/ab.tar.gz; each TAG=COMMIT names a build.
"""
import argparse
import json
import os


def shape(params):
    return tuple(params.get(k) for k in ("Q", "T", "H", "d", "k", "B", "len", "next_n"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ab_dir")
    ap.add_argument("out")
    ap.add_argument("builds", nargs="+", help="TAG=COMMIT")
    ap.add_argument("--options", nargs="*", default=[], help="TAG=NVRTC options")
    a = ap.parse_args()
    commits = dict(b.split("=", 1) for b in a.builds)
    options = dict(o.split("=", 1) for o in a.options)
    engines = []
    path = os.path.join(a.ab_dir, "engines.jsonl")
    if os.path.exists(path):
        engines = [json.loads(l) for l in open(path) if l.startswith("{")]
    anchors = {}
    for e in engines:
        if "ms_median" in e:
            anchors.setdefault((e["workload"], shape(e["params"])), {})[e["impl"]] = e["ms_median"]
    lines = [json.dumps(e) for e in engines]
    for tag, commit in commits.items():
        path = os.path.join(a.ab_dir, f"bench-{tag}.jsonl")
        if not os.path.exists(path):
            continue
        for line in open(path):
            r = json.loads(line)
            r["build"], r["build_commit"] = tag, commit
            if tag in options:
                r["nvrtc_options"] = options[tag]
            found = anchors.get((r.get("workload"), shape(r.get("params", {}))))
            if found and "ms_median" in r and r.get("impl") in ("winnow", "materialize"):
                r["anchors"] = {k: {"ms": round(v, 4), "ratio": round(r["ms_median"] / v, 4)}
                                for k, v in found.items()}
                r["anchors_file"] = "the engines' records of this file (same call, after winnow)"
            lines.append(json.dumps(r))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{a.out}: {len(lines)} records ({len(engines)} of the engines)")


if __name__ == "__main__":
    main()
