#!/usr/bin/env python3
"""Scores fixture completions through a running `cudaperf serve` with the Python client
(used by tools/gpu-serve-node.sh on the GPU machine; works on a CPU machine too, where
the GPU stages answer `unavailable`).

    python3 tools/gpu_serve_client.py --url http://127.0.0.1:PORT --out answers.json

For vector_add and softmax_rows it sends one group each: the reference, every known
implementation, a reward hack (vector_add), a compile error and a completion without code;
then the same groups again (served from the evaluator's memo), then a TRL-style batch
mixing both tasks. Prints a table (verdict, value, speedup, time) and writes every answer.
"""

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from cudaperf_client import CudaperfClient, trl_reward  # noqa: E402


def fenced(src: str) -> str:
    return f"```cuda\n{src}\n```"


def group_for(task: str):
    d = REPO / "fixtures" / "tasks" / task
    toml = (d / "task.toml").read_text()
    names = ["reference.cu"]
    for line in toml.splitlines():
        if line.startswith("implementations"):
            names += json.loads(line.split("=", 1)[1].strip())
    items = [(n.removesuffix(".cu"), fenced((d / n).read_text())) for n in names]
    if task == "vector_add":
        items.append(("hack_constant_output", fenced((REPO / "fixtures/hacks/constant_output.cu").read_text())))
    ref = (d / "reference.cu").read_text()
    items.append(("compile_error", fenced(ref.replace("{", "{ undefined_symbol_here;", 1))))
    items.append(("no_code", "I cannot write this kernel."))
    return items


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reward", default="cudaperf")
    args = ap.parse_args()
    client = CudaperfClient(args.url, timeout=1800)
    print("health:", json.dumps(client.health()))
    answers = {}
    for rnd in ("cold", "warm"):
        for task in ("vector_add", "softmax_rows"):
            items = group_for(task)
            t0 = time.monotonic()
            ans = client.score(task, [c for _, c in items], reward=args.reward)
            wall = time.monotonic() - t0
            answers[f"{rnd}/{task}"] = ans
            print(f"\n[{rnd}] {task}: {len(items)} completions in {wall * 1e3:.0f} ms "
                  f"(server: queue {ans['timing']['queue_ms']:.0f} ms, score {ans['timing']['score_ms']:.0f} ms, "
                  f"by {ans['scored_by']})")
            print(f"  {'completion':<30} {'verdict':<16} {'value':>8} {'speedup':>9}  reason")
            for (name, _), r in zip(items, ans["results"]):
                timing = ((r.get("report") or {}).get("stages") or {}).get("timing") or {}
                sp = timing.get("speedup")
                value = "null" if r["value"] is None else f"{r['value']:.3f}"
                speed = "-" if sp is None else f"{sp:.2f}x"
                reason = (r.get("reason") or "")[:70]
                print(f"  {name:<30} {r['verdict']:<16} {value:>8} {speed:>9}  {reason}")
    # A TRL-style batch: prompts of both tasks interleaved, conversational completions.
    va, sm = group_for("vector_add"), group_for("softmax_rows")
    completions = [[{"role": "assistant", "content": va[0][1]}], sm[0][1], va[1][1], sm[1][1]]
    fn = trl_reward(client, reward=args.reward)
    t0 = time.monotonic()
    values = fn(["p"] * 4, completions, task_id=["vector_add", "softmax_rows", "vector_add", "softmax_rows"])
    print(f"\nTRL reward function, 4 completions of 2 tasks: {values} in {(time.monotonic() - t0) * 1e3:.0f} ms")
    answers["trl_values"] = values
    metrics = client.metrics()
    answers["metrics"] = metrics
    print("\nmetrics (selected):")
    for line in metrics.splitlines():
        if line.startswith(("cudaperf_completions_total", "cudaperf_gpu_busy_seconds_total",
                            "cudaperf_stage_duration_seconds_sum", "cudaperf_stage_duration_seconds_count")):
            print(" ", line)
    Path(args.out).write_text(json.dumps(answers, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
