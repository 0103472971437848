"""Summarises `cudaperf score --json` outputs, one line per candidate.

usage: python3 tools/gpu/score-table.py LABEL FILE.json [FILE.json ...]
Prints: label, file, verdict, reference kind, reference_us, candidate_us, speedup, ci95,
GPU-stage wall ms (stages.execute.millis), and the first reason when not correct.
"""
import json
import sys


def rows(path):
    try:
        d = json.load(open(path))
    except Exception as e:  # an empty or cut file: say so, not crash
        yield {"file": path, "error": f"unreadable: {e}"}
        return
    for r in d if isinstance(d, list) else [d]:
        yield r


def main(label, paths):
    for p in paths:
        for r in rows(p):
            if "error" in r and "report" not in r and "verdict" not in r:
                print(f"{label}\t{r.get('file', p)}\tERROR\t{r['error']}")
                continue
            rep = r.get("report") or r
            st = rep.get("stages") or {}
            t = st.get("timing") or {}
            ex = st.get("execute") or {}
            verdict = rep.get("verdict", "?")
            why = ""
            if verdict != "correct":
                why = json.dumps(ex.get("status"))[:160] if ex else str(r.get("error", ""))[:160]
            ci = t.get("ci95") or [None, None]
            fmt = lambda v: "-" if v is None else f"{v:.3f}"
            print("\t".join([label, str(r.get("file", p)), verdict, str(t.get("reference", "-")),
                             fmt(t.get("reference_us")), fmt(t.get("candidate_us")),
                             fmt(t.get("speedup")), f"[{fmt(ci[0])}, {fmt(ci[1])}]",
                             fmt(ex.get("millis")), why]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
