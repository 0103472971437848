"""Scoring a trainer's batch: one request per group (same task, reward, weights and step),
groups sent concurrently, results back in the batch's order, "no value" resolved by a
:class:`~cudaperf_client.policy.NoValuePolicy` (sync and ``asyncio`` flavours)."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .client import Completion, CudaperfClient, CudaperfError
from .policy import NoValuePolicy


@dataclass(frozen=True)
class GroupKey:
    """What one request shares: the task and the reward settings."""

    task: str
    reward: Optional[str] = None
    weights: Optional[str] = None  # JSON text, so the key is hashable
    step: Optional[int] = None

    @staticmethod
    def of(
        task: Any, reward: Optional[str], weights: Optional[Mapping[str, float]], step: Optional[int]
    ) -> "GroupKey":
        w = None if weights is None else json.dumps(dict(weights), sort_keys=True)
        return GroupKey(str(task), reward, w, None if step is None else int(step))

    def kwargs(self) -> Dict[str, Any]:
        return {
            "step": self.step,
            "reward": self.reward,
            "weights": None if self.weights is None else json.loads(self.weights),
        }


def group_positions(keys: Sequence[GroupKey]) -> Dict[GroupKey, List[int]]:
    """Positions of each group, in first-seen order."""
    groups: Dict[GroupKey, List[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return groups


def _merge(results: List[Dict[str, Any]], positions: Sequence[int], again: Sequence[Mapping[str, Any]]) -> None:
    for i, r in zip(positions, again):
        r = dict(r)
        r["index"] = results[i]["index"]
        r["retried"] = True
        results[i] = r


def score_group(
    client: CudaperfClient,
    key: GroupKey,
    completions: Sequence[Completion],
    policy: NoValuePolicy,
    *,
    report: bool = False,
) -> List[Dict[str, Any]]:
    """Scores one group; unscored completions (and a server that is away) are asked
    again within ``policy.retry_for_s``; returns one result per completion, each with a
    number (or raises, see :class:`NoValuePolicy`)."""
    give_up = time.monotonic() + (policy.retry_for_s if policy.mode != "raise" else 0.0)
    backoff = policy.first_backoff_s

    def wait() -> bool:
        nonlocal backoff
        left = give_up - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(backoff, left))
        backoff = policy.next_backoff(backoff)
        return True

    while True:
        try:
            answer = client.score(key.task, completions, report=report, **key.kwargs())
            break
        except CudaperfError as e:
            if not e.transient or not wait():
                raise
    results = [dict(r) for r in answer["results"]]
    pending = policy.pending(results)
    while pending and wait():
        try:
            again = client.score(key.task, [completions[i] for i in pending], report=report, **key.kwargs())
        except CudaperfError as e:
            if not e.transient:
                raise
            continue
        _merge(results, pending, again["results"])
        pending = policy.pending(results)
    return policy.resolve(results, f"task `{key.task}`")


def score_batch(
    client: CudaperfClient,
    keys: Sequence[GroupKey],
    completions: Sequence[Completion],
    policy: NoValuePolicy,
    *,
    max_workers: int = 8,
    report: bool = False,
) -> List[Dict[str, Any]]:
    """Scores a batch whose items may belong to different groups: one request per group,
    sent from up to ``max_workers`` threads; one result per item, in order."""
    if len(keys) != len(completions):
        raise ValueError(f"{len(keys)} group keys for {len(completions)} completions")
    groups = group_positions(keys)

    def one(item: Tuple[GroupKey, List[int]]) -> Tuple[List[int], List[Dict[str, Any]]]:
        key, idx = item
        return idx, score_group(client, key, [completions[i] for i in idx], policy, report=report)

    out: List[Optional[Dict[str, Any]]] = [None] * len(completions)
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(groups) or 1))) as pool:
        for idx, results in pool.map(one, groups.items()):
            if len(results) != len(idx):
                raise CudaperfError(0, f"the server answered {len(results)} results for {len(idx)} completions")
            for i, r in zip(idx, results):
                out[i] = r
    return out  # type: ignore[return-value]


async def score_group_async(
    client: Any,
    key: GroupKey,
    completions: Sequence[Completion],
    policy: NoValuePolicy,
    *,
    report: bool = False,
) -> List[Dict[str, Any]]:
    """:func:`score_group` with an :class:`~cudaperf_client.AsyncCudaperfClient`."""
    give_up = time.monotonic() + (policy.retry_for_s if policy.mode != "raise" else 0.0)
    backoff = policy.first_backoff_s

    async def wait() -> bool:
        nonlocal backoff
        left = give_up - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(backoff, left))
        backoff = policy.next_backoff(backoff)
        return True

    while True:
        try:
            answer = await client.score(key.task, completions, report=report, **key.kwargs())
            break
        except CudaperfError as e:
            if not e.transient or not await wait():
                raise
    results = [dict(r) for r in answer["results"]]
    pending = policy.pending(results)
    while pending and await wait():
        try:
            again = await client.score(key.task, [completions[i] for i in pending], report=report, **key.kwargs())
        except CudaperfError as e:
            if not e.transient:
                raise
            continue
        _merge(results, pending, again["results"])
        pending = policy.pending(results)
    return policy.resolve(results, f"task `{key.task}`")


async def score_batch_async(
    client: Any,
    keys: Sequence[GroupKey],
    completions: Sequence[Completion],
    policy: NoValuePolicy,
    *,
    report: bool = False,
) -> List[Dict[str, Any]]:
    """:func:`score_batch` with an :class:`~cudaperf_client.AsyncCudaperfClient`: the
    groups' requests run concurrently on the event loop."""
    if len(keys) != len(completions):
        raise ValueError(f"{len(keys)} group keys for {len(completions)} completions")
    groups = list(group_positions(keys).items())
    answers = await asyncio.gather(
        *(score_group_async(client, k, [completions[i] for i in idx], policy, report=report) for k, idx in groups)
    )
    out: List[Optional[Dict[str, Any]]] = [None] * len(completions)
    for (_, idx), results in zip(groups, answers):
        if len(results) != len(idx):
            raise CudaperfError(0, f"the server answered {len(results)} results for {len(idx)} completions")
        for i, r in zip(idx, results):
            out[i] = r
    return out  # type: ignore[return-value]
