#!/usr/bin/env python3
"""Put a re-measured task into the program table (issue 21, after tools/gpu/rl-table2.sh).

The GPU run measured the programs of a superset of speed options, with the knob indices of
that superset; the space's code was then narrowed to the picked options. This script keeps
the measured rows whose program (by hash) is in the narrowed space, gives each the knob
combination and weight of the narrowed space (from `program_table --tasks TASK --hashes`
run on the narrowed code), checks that every program of the narrowed space has exactly one
row, and replaces the task's rows of the table with them (in the space's order); the other
tasks' rows stay as they are, line for line.

  rl-merge.py --table T.jsonl.gz --task transpose --hashes narrowed.txt \\
      --rows phase1.jsonl.gz phase2.jsonl.gz --out T2.jsonl
"""
import argparse
import gzip
import json
import sys


def lines(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [l for l in f.read().splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--hashes", required=True)
    ap.add_argument("--rows", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    combos = {}  # hash -> knob combinations of the narrowed space, in its order
    for l in lines(a.hashes):
        if l.startswith("#"):
            continue
        task, h, ks = l.split()
        if task == a.task:
            combos.setdefault(h, []).append([int(x) for x in ks.split(",")])
    measured = {}
    for p in a.rows:
        for l in lines(p):
            r = json.loads(l)
            if r["task"] != a.task or r["hash"] not in combos:
                continue
            if r["hash"] in measured:
                sys.exit(f"{a.task} {r['hash']}: measured twice")
            measured[r["hash"]] = r
    missing = [h for h in combos if h not in measured]
    if missing:
        sys.exit(f"{a.task}: {len(missing)} programs of the narrowed space not measured, e.g. {missing[0]}")
    rows = []
    for h, cs in combos.items():  # dicts keep the space's order
        r = measured[h]
        r["knobs"], r["weight"] = cs[0], len(cs)
        rows.append(json.dumps(r, separators=(",", ":")))
    out = []
    placed = False
    for l in lines(a.table):
        if json.loads(l)["task"] == a.task:
            if not placed:
                out.extend(rows)
                placed = True
            continue
        out.append(l)
    if not placed:
        out.extend(rows)
    op = gzip.open if a.out.endswith(".gz") else open
    with op(a.out, "wt") as f:
        f.write("\n".join(out) + "\n")
    print(f"{a.out}: {len(rows)} {a.task} rows ({len(measured)} measured programs kept), "
          f"{len(out) - len(rows)} other rows")


if __name__ == "__main__":
    main()
