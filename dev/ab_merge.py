"""One result file from a dev/gpu_ab.sh call: the engines' records first, then every build's
records with `build` (the tag), `build_commit` and `nvrtc_options` fields. The engines ran
after winnow in the same call, on the same GPU, so winnow's records carry no `anchors`
ratios: matching a record to the engines' is `winnow bench --anchors`'s job
(tools/anchor_ratios.h), not a second copy here.

    python3 dev/ab_merge.py AB_DIR OUT.jsonl base=fb935d9 new=797f5df [--options q6=-DX=6]

AB_DIR is the unpacked `ab/` folder of $OUT/ab.tar.gz; each TAG=COMMIT names a build.
"""
import argparse
import json
import os


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
            lines.append(json.dumps(r))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{a.out}: {len(lines)} records ({len(engines)} of the engines)")


if __name__ == "__main__":
    main()
