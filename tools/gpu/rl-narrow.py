#!/usr/bin/env python3
"""Narrow a task's space to the options a re-measure picked (issue 21, after
tools/gpu/rl-table2.sh): rewrites the `KNOBS` list of the task's space file as its
`SUPERSET` list with each speed knob's options cut to the `CHOICE` line of select.txt (in
the superset's order; hazard knobs and knobs the line does not name stay whole). Then
rebuild, `program_table --tasks TASK --hashes` and tools/gpu/rl-merge.py.

  rl-narrow.py --file examples/common/space/transpose.rs --task transpose --choice select.txt
"""
import argparse
import re
import sys

KNOB = re.compile(r'^(\s*Knob \{ name: "([^"]+)", options: &\[)([^\]]*)(\], hazard: (true|false) \},)$')


def block(lines, name):
    start = next((i for i, l in enumerate(lines) if l.startswith(f"pub const {name}: &[Knob] = &[")), None)
    if start is None:
        sys.exit(f"no `pub const {name}` list")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "];")
    return start, end


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--choice", required=True)
    a = ap.parse_args()
    choice = None
    for l in open(a.choice):
        if l.startswith(f"CHOICE {a.task} "):
            choice = dict(kv.split("=", 1) for kv in l.split(" ", 2)[2].strip().split(";"))
    if choice is None:
        sys.exit(f"{a.choice}: no CHOICE line for {a.task}")
    lines = open(a.file).read().split("\n")
    s0, s1 = block(lines, "SUPERSET")
    out = []
    for l in lines[s0 + 1:s1]:
        m = KNOB.match(l)
        if not m:
            sys.exit(f"{a.file}: not a knob line: {l}")
        opts = [o.strip().strip('"') for o in m.group(3).split(",")]
        if m.group(2) in choice:
            keep = choice.pop(m.group(2)).split("|")
            if any(o not in opts for o in keep):
                sys.exit(f"{m.group(2)}: {keep} not all in {opts}")
            opts = [o for o in opts if o in keep]
        out.append(m.group(1) + ", ".join(f'"{o}"' for o in opts) + m.group(4))
    if choice:
        sys.exit(f"CHOICE names knobs the superset lacks: {sorted(choice)}")
    k0, k1 = block(lines, "KNOBS")
    lines[k0 + 1:k1] = out
    open(a.file, "w").write("\n".join(lines))
    print(f"{a.file}: KNOBS narrowed:\n" + "\n".join(out))


if __name__ == "__main__":
    main()
