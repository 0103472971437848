"""Load test of ``cudaperf serve`` through the asyncio client.

N concurrent clients (coroutines on one event loop, as a trainer's async reward function
would run them) send groups of real completions (the fixtures' ``.cu`` files of 12 tasks,
fenced) after one warm-up pass, so every score comes from the server's warm caches.
Reports sustained scores/s, p50/p99 request latency, and results lost, duplicated,
out of order or different from the warm-up's.

    python3 python/bench/load_async.py --url http://127.0.0.1:8000 --clients 64 --seconds 20

``--interval S`` makes each client wait S seconds between its requests (a trainer sends a
group, then generates); without it each client sends its next request as soon as its last
one is answered (closed loop: the server's saturation rate). Exits 1 if anything was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudaperf_client import AsyncCudaperfClient  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def groups(group: int, tasks: int = 12) -> List[Tuple[str, List[str]]]:
    """For each of the first ``tasks`` fixture tasks, its ``.cu`` files (reference first),
    fenced and cycled to ``group`` completions."""
    out = []
    for d in sorted((REPO / "fixtures" / "tasks").iterdir())[:tasks]:
        files = sorted(d.glob("*.cu"), key=lambda p: (p.name != "reference.cu", p.name))
        impls = [f"```cuda\n{p.read_text()}\n```" for p in files]
        if impls:
            out.append((d.name, [impls[k % len(impls)] for k in range(group)]))
    return out


def expected_of(answer: Dict[str, Any]) -> List[Tuple[int, str, Any]]:
    return [(r["index"], r["verdict"], r["value"]) for r in answer["results"]]


async def run(args: argparse.Namespace) -> int:
    work = groups(args.group)
    client = AsyncCudaperfClient(args.url, timeout=120, connections=args.clients)
    expected: Dict[str, List[Tuple[int, str, Any]]] = {}
    for task, comps in work:  # warm-up: compiles, structure, ranker
        expected[task] = expected_of(await client.score(task, comps, reward=args.reward, report=args.report))
    latencies: List[float] = []
    problems: List[str] = []
    sent = 0
    answered = 0
    end = time.monotonic() + args.seconds

    async def one_client(c: int) -> None:
        nonlocal sent, answered
        k = c
        rng = random.Random(c)
        if args.interval:
            await asyncio.sleep(rng.uniform(0, args.interval))  # spread the clients out
        for _ in range(args.requests):
            if time.monotonic() >= end:
                return
            task, comps = work[k % len(work)]
            k += 1
            t = time.perf_counter()
            sent += 1
            answer = await client.score(task, comps, reward=args.reward, report=args.report)
            latencies.append(time.perf_counter() - t)
            answered += 1
            got = expected_of(answer)
            if got != expected[task]:
                problems.append(f"client {c} task {task}: {got} != {expected[task]}")
            if args.interval:
                await asyncio.sleep(args.interval)

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in range(args.clients)))
    wall = time.perf_counter() - t0
    await client.close()
    lat = sorted(latencies)
    scores = answered * args.group
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3  # noqa: E731
    print(
        f"clients {args.clients}, group {args.group}, reward {args.reward}, reports {args.report}, "
        f"interval {args.interval} s: {answered} requests in {wall:.1f} s = {answered / wall:.0f} req/s, "
        f"{scores / wall:.0f} scores/s; latency p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
        f"mean {statistics.mean(lat) * 1e3:.1f} ms; lost {sent - answered}, wrong {len(problems)}"
    )
    for line in problems[:5]:
        print("  ", line)
    return 0 if sent == answered and not problems else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("CUDAPERF_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--requests", type=int, default=1_000_000, help="per client")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--reward", default="cudaperf")
    ap.add_argument("--report", action="store_true", help="ask for the per-stage reports")
    ap.add_argument("--interval", type=float, default=0.0)
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
