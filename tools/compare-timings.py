#!/usr/bin/env python3
"""Compares two timings files written by `cudaperf measure` (e.g. protocol v1 and v2).

For every implementation timed in both: the verdicts, the speedups over the reference, and
whether they agree within the noise. Two measurements agree when the relative difference of
their speedups is within the sum of their 95 % interval half-widths, their noise floors and
a 2 % allowance for run-to-run drift of the card. Prints one line per implementation and a
summary (the spread of the speedup ratios, and how many orders of two implementations of
one task flipped); exits 1 if any implementation is not correct in the second file.

usage: tools/compare-timings.py OLD.json NEW.json
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def half_width(t):
    ci = t.get("ci95") or [None, None]
    s = t.get("raw_speedup")
    if None in ci or not s:
        return 0.0
    return (ci[1] - ci[0]) / 2.0 / s


def main():
    old, new = load(sys.argv[1]), load(sys.argv[2])
    rows, moved, not_correct = [], [], []
    for task, tt in sorted(new["tasks"].items()):
        for name, t in sorted(tt["implementations"].items()):
            o = old["tasks"].get(task, {}).get("implementations", {}).get(name)
            if t.get("verdict") != "correct":
                not_correct.append(f"{task}/{name}: {t.get('verdict')} {t.get('reason') or ''}")
            if not o or not o.get("raw_speedup") or not t.get("raw_speedup"):
                rows.append(f"{task:<26} {name:<34} {'-':>8} {t.get('raw_speedup') or 0:8.3f}  (not in both)")
                continue
            a, b = o["raw_speedup"], t["raw_speedup"]
            rel = abs(b - a) / a
            allow = half_width(o) + half_width(t) + (o.get("noise_floor") or 0) + (t.get("noise_floor") or 0) + 0.02
            flag = "" if rel <= allow else "  MOVED"
            if flag:
                moved.append((task, name, a, b, rel, allow))
            rows.append(f"{task:<26} {name:<34} {a:8.3f} {b:8.3f} {100*rel:6.2f} % (allowed {100*allow:5.2f} %){flag}")
    print(f"# {sys.argv[1]} ({old.get('device')}, {old.get('date')}) vs {sys.argv[2]} ({new.get('device')}, {new.get('date')})")
    print(f"{'task':<26} {'implementation':<34} {'old':>8} {'new':>8}")
    print("\n".join(rows))
    print(f"\n{len(rows)} implementations; {len(not_correct)} not correct in the new file; {len(moved)} moved beyond the noise:")
    for task, name, a, b, rel, allow in moved:
        print(f"  {task}/{name}: x{a:.3f} -> x{b:.3f} ({100*rel:.1f} %, allowed {100*allow:.1f} %)")
    for line in not_correct:
        print(f"  NOT CORRECT {line}")
    summary(old["tasks"], new["tasks"])
    return 1 if not_correct else 0


def summary(old, new):
    """Speedup ratios new/old over the implementations (not references) in both, and the
    within-task orders that flipped."""
    ratios, flips, pairs = [], 0, 0
    for task, tt in new.items():
        o = old.get(task, {}).get("implementations", {})
        names = [k for k, t in tt["implementations"].items()
                 if k != "reference" and t.get("raw_speedup") and o.get(k, {}).get("raw_speedup")]
        ratios += [tt["implementations"][k]["raw_speedup"] / o[k]["raw_speedup"] for k in names]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                before = o[a]["raw_speedup"] - o[b]["raw_speedup"]
                after = tt["implementations"][a]["raw_speedup"] - tt["implementations"][b]["raw_speedup"]
                pairs += 1
                flips += before * after < 0
    if len(ratios) < 2:
        return
    q = statistics.quantiles(ratios, n=4)
    within = lambda pct: sum(abs(r - 1) < pct / 100 for r in ratios)
    print(f"\nspeedup new/old over {len(ratios)} implementations: median {statistics.median(ratios):.4f}, "
          f"quartiles {q[0]:.4f}..{q[2]:.4f}, range {min(ratios):.3f}..{max(ratios):.3f}; "
          f"within 2 %: {within(2)}, within 5 %: {within(5)}; "
          f"within-task orders flipped: {flips} of {pairs}")


if __name__ == "__main__":
    sys.exit(main())
