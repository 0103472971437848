#!/usr/bin/env python3
"""Compares two timings files of `cudaperf measure` (e.g. before and after a harness change):
how far each implementation's speedup moved, and how many within-task orders flipped.

Usage: python3 tools/compare-timings.py OLD.json NEW.json
"""
import json
import statistics as st
import sys


def load(path):
    with open(path) as f:
        return json.load(f)["tasks"]


def main(old_path, new_path):
    old, new = load(old_path), load(new_path)
    ratios, ref_ratios, flips, pairs, moved = [], [], 0, 0, []
    for task, entry in sorted(new.items()):
        if task not in old:
            continue
        o, n = old[task]["implementations"], entry["implementations"]
        names = [k for k in n if k in o and k != "reference"
                 and "raw_speedup" in n[k] and "raw_speedup" in o[k]]
        for k in names:
            r = n[k]["raw_speedup"] / o[k]["raw_speedup"]
            ratios.append(r)
            moved.append((r, f"{task}/{k}"))
        if names:
            ref_ratios.append(n[names[0]]["reference_us"] / o[names[0]]["reference_us"])
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pairs += 1
                before = o[a]["raw_speedup"] - o[b]["raw_speedup"]
                after = n[a]["raw_speedup"] - n[b]["raw_speedup"]
                flips += before * after < 0
    if not ratios:
        sys.exit("no implementation is in both files")
    q = st.quantiles(ratios, n=4)
    print(f"implementations in both: {len(ratios)}")
    print(f"speedup new/old: median {st.median(ratios):.4f}, quartiles {q[0]:.4f}..{q[2]:.4f}, "
          f"range {min(ratios):.3f}..{max(ratios):.3f}")
    print(f"reference time new/old: median {st.median(ref_ratios):.4f}, "
          f"range {min(ref_ratios):.3f}..{max(ref_ratios):.3f}")
    for pct in (2, 5):
        k = sum(abs(r - 1) < pct / 100 for r in ratios)
        print(f"within {pct} %: {k}/{len(ratios)}")
    print(f"within-task order flips: {flips} of {pairs} pairs")
    moved.sort()
    print("moved most:", ", ".join(f"{name} {r:.3f}" for r, name in moved[:3] + moved[-3:]))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
