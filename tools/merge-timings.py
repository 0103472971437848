#!/usr/bin/env python3
"""Merges timings files written by `cudaperf measure` (later files win per task), e.g. a
dataset measured over several GPU calls, or a few tasks re-measured after a fix.

usage: tools/merge-timings.py OUT.json IN1.json [IN2.json ...]
The device and driver must agree; the date and command of every part are kept in `command`.
"""
import json
import sys

out_path, parts = sys.argv[1], sys.argv[2:]
if not parts:
    sys.exit(__doc__)
merged = None
for p in parts:
    with open(p) as f:
        t = json.load(f)
    if merged is None:
        merged = {k: v for k, v in t.items() if k != "tasks"}
        merged["tasks"] = {}
        merged["command"] = []
    elif (t["device"], t["driver"]) != (merged["device"], merged["driver"]):
        sys.exit(f"{p}: measured on {t['device']} / {t['driver']}, the others on "
                 f"{merged['device']} / {merged['driver']}")
    merged["command"].append(f"{t['date']}: {t['command']} ({len(t['tasks'])} tasks)")
    merged["tasks"].update(t["tasks"])
merged["command"] = " ; ".join(merged["command"])
with open(out_path, "w") as f:
    json.dump(merged, f, indent=2, sort_keys=False)
    f.write("\n")
print(f"{out_path}: {len(merged['tasks'])} tasks from {len(parts)} files")
