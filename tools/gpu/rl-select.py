#!/usr/bin/env python3
"""Pick each task's speed-knob options from a measured superset (issue 21, step 1).

Runs on the GPU machine between the two phases of tools/gpu/rl-table2.sh, so the rule is
fixed before any number is seen:

  phase 1 measured every hazard-free program of a superset of speed options;
  this script keeps, per speed knob, a subset of its options (the superset's fastest
  correct program always stays) such that the task's space has between --min and --max
  distinct programs (16 hazard combinations x the speed combinations), and
    1. the share of knob combinations that are correct and >= 0.9 x the best is smallest
       among subsets with <= --target (default 0.05 %), preferring more speed knobs with
       two or more options, then the smaller share at 0.85 x (robustness), then more
       programs;
    2. if no subset reaches --target: the smallest share at 0.9 x, then the same order.
  An option under which a hazard-free program is NOT correct is dropped first (a speed
  knob's options must all be correct kernels).
It writes the hazard programs of the chosen subsets as an --only list for phase 2.

  rl-select.py --hashes H --table P1.jsonl --only-out P2.txt [--report R.txt]
"""
import argparse
import itertools
import json
import sys


def read_hashes(path):
    tasks = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#knobs "):
            parts = line.split()
            knobs = []
            for k in parts[2:]:
                name, kind, opts = k.split(":", 2)
                knobs.append((name, kind == "hazard", opts.split("|")))
            tasks[parts[1]] = {"knobs": knobs, "combos": {}}
            continue
        task, h, ks = line.split()
        tasks[task]["combos"][tuple(int(x) for x in ks.split(","))] = h
    return tasks


def nonempty_subsets(n, must):
    for r in range(1, n + 1):
        for s in itertools.combinations(range(n), r):
            if must in s:
                yield s


def gaps(task, knobs, sp, speed, best_key, best):
    """Report lines (no part of the rule): per speed option, the best speed it reaches
    relative to the task's best, and its speed relative to the best's option of that knob
    with every other knob the same (min, median, max over the superset's combinations)."""
    out = []
    for j in range(len(sp)):
        name, _, opts = knobs[sp[j]]
        u = best_key[j]
        for v in range(len(opts)):
            top = max((s for k, s in speed.items() if s is not None and k[j] == v), default=None)
            pairs = []
            for k, s in speed.items():
                if k[j] != v or v == u or s is None:
                    continue
                other = speed.get(k[:j] + (u,) + k[j + 1:])
                if other:
                    pairs.append(s / other)
            pairs.sort()
            line = f"{task}: gap {name}={opts[v]}: best {top / best:.3f} of the best" if top else \
                f"{task}: gap {name}={opts[v]}: no correct program"
            if pairs:
                line += (f"; vs {name}={opts[u]} (others fixed, {len(pairs)} pairs): "
                         f"min {pairs[0]:.3f} median {pairs[len(pairs) // 2]:.3f} max {pairs[-1]:.3f}")
            out.append(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hashes", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--only-out", required=True)
    ap.add_argument("--report")
    ap.add_argument("--min", type=int, default=2000)
    ap.add_argument("--max", type=int, default=4400)
    ap.add_argument("--target", type=float, default=0.0005)
    a = ap.parse_args()
    tasks = read_hashes(a.hashes)
    rows = {}
    for line in open(a.table):
        if line.strip():
            r = json.loads(line)
            rows[(r["task"], r["hash"])] = r
    report = []
    only = []
    for task, info in tasks.items():
        knobs = info["knobs"]
        hz = [i for i, k in enumerate(knobs) if k[1]]
        sp = [i for i, k in enumerate(knobs) if not k[1]]
        free = {c: h for c, h in info["combos"].items() if all(c[i] == 0 for i in hz)}
        speed = {}
        bad_opts = set()
        missing = 0
        for c, h in free.items():
            r = rows.get((task, h))
            key = tuple(c[i] for i in sp)
            if r is None:
                missing += 1
                speed[key] = None
                continue
            if r["verdict"] == "correct" and r.get("speedup") is not None:
                speed[key] = r["speedup"]
            else:
                speed[key] = None
                for j, v in enumerate(key):
                    bad_opts.add((j, v))
                report.append(f"{task}: hazard-free program NOT correct ({r['verdict']}): "
                              + " ".join(f"{knobs[sp[j]][0]}={knobs[sp[j]][2][v]}" for j, v in enumerate(key)))
        if missing:
            report.append(f"{task}: {missing} hazard-free programs not measured: no selection")
            continue
        # An option is dropped only if every non-correct program has it (the usual case: one
        # option is the culprit); otherwise the non-correct programs' options all go.
        allowed = []
        for j in range(len(sp)):
            n = len(knobs[sp[j]][2])
            allowed.append([v for v in range(n) if (j, v) not in bad_opts] or list(range(n)))
        best_key = max((k for k, s in speed.items() if s is not None
                        and all(k[j] in allowed[j] for j in range(len(sp)))), key=lambda k: speed[k])
        best = speed[best_key]
        n_h = 1
        for i in hz:
            n_h *= len(knobs[i][2])
        cands = []
        subsets = [
            [tuple(allowed[j][x] for x in s)
             for s in nonempty_subsets(len(allowed[j]), allowed[j].index(best_key[j]))]
            for j in range(len(sp))
        ]
        for pick in itertools.product(*subsets):
            size = 1
            for s in pick:
                size *= len(s)
            n = n_h * size
            if n < a.min or n > a.max:
                continue
            k90 = k85 = 0
            for key in itertools.product(*pick):
                s = speed[key]
                if s is None:
                    continue
                if s >= 0.9 * best:
                    k90 += 1
                if s >= 0.85 * best:
                    k85 += 1
            kept = sum(len(s) >= 2 for s in pick)
            cands.append((k90 / n, kept, k85 / n, n, pick, k90, k85))
        if not cands:
            report.append(f"{task}: no subset has {a.min}..{a.max} programs")
            continue
        hit = [c for c in cands if c[0] <= a.target]
        if hit:
            hit.sort(key=lambda c: (-c[1], c[2], -c[3], c[0]))
            choice = hit[0]
            rule = f"share <= {100 * a.target:.3f} %"
        else:
            cands.sort(key=lambda c: (c[0], -c[1], c[2], -c[3]))
            choice = cands[0]
            rule = "smallest share (none reaches the target)"
        report.extend(gaps(task, knobs, sp, speed, best_key, best))
        share, kept, share85, n, pick, k90, k85 = choice
        report.append(
            f"{task}: best {best:.3f}x ({' '.join(knobs[sp[j]][0] + '=' + knobs[sp[j]][2][v] for j, v in enumerate(best_key))}); "
            f"rule: {rule}; {len(cands)} candidate subsets, {len(hit)} reach the target")
        report.append(
            f"{task}: chosen {n} programs, {kept} speed knobs with >= 2 options, "
            f">= 0.9x best: {k90} ({100 * share:.4f} %), >= 0.85x best: {k85} ({100 * share85:.4f} %)")
        for j, s in enumerate(pick):
            name, _, opts = knobs[sp[j]]
            report.append(f"{task}:   {name}: {'|'.join(opts[v] for v in s)}")
        report.append(f"CHOICE {task} " + ";".join(
            knobs[sp[j]][0] + "=" + "|".join(knobs[sp[j]][2][v] for v in s) for j, s in enumerate(pick)))
        picks = {sp[j]: set(s) for j, s in enumerate(pick)}
        seen = set()
        for c, h in info["combos"].items():
            if all(c[i] == 0 for i in hz):
                continue
            if all(c[i] in picks[i] for i in sp) and h not in seen:
                seen.add(h)
                only.append(f"{task} {h}")
    with open(a.only_out, "w") as f:
        f.write("\n".join(only) + ("\n" if only else ""))
    text = "\n".join(report) + f"\n{len(only)} hazard programs to measure in phase 2\n"
    sys.stdout.write(text)
    if a.report:
        open(a.report, "w").write(text)


if __name__ == "__main__":
    main()
