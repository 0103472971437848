"""What a trainer gets for a completion the server could not score ("no value").

The server answers ``value: null`` when it cannot score a completion here (a GPU stage
unavailable, the request's deadline passed, the queue lost). A trainer must never read
that as a number by accident: TRL turns ``None`` into NaN and sums its reward functions
with ``nansum`` (TRL 1.5.x and earlier, ``GRPOTrainer._generate_and_score_completions``),
so with one reward function an unscored completion gets **0.0**, more than an incorrect
kernel (−0.25 … 0), a fault (−0.5) or a compile error (−0.75) under ``cudaperf``; since TRL
1.6.0 (PR #5902) a row whose reward functions *all* return ``None`` is left out of the
baseline, but next to another reward function ``None`` still adds 0.0 to the sum. A policy
could then earn more by being unscorable than by being wrong.

So the adapters resolve "no value" here, with one of three behaviours:

* ``"retry"`` (the default): ask again for the unscored completions, with backoff, for up
  to ``retry_for_s`` seconds (the server may be restarting, Redis may be back, a GPU
  node may join); then raise :class:`~cudaperf_client.CudaperfUnavailable`. Never a number.
* ``"raise"``: raise at once.
* a number: the explicit fallback, which must be **strictly below every value a candidate
  can earn** from the reward asked for (:data:`FLOORS`), so that being unscorable never
  pays more than the worst kernel: e.g. ``-1.5`` for ``cudaperf`` or ``dhrcl``, ``-0.5``
  for ``correctness``, ``kevin`` and ``fast_p:<p>``.

A ``crashed`` completion (it killed every node that ran it) is not asked again: running it
again would kill more nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .client import CudaperfUnavailable

#: The lowest value a candidate can earn from each preset: ``cudaperf`` has its outcome
#: ladder (−1 for a missing code block, syntax credit clamped to [0, 0.2]); ``dhrcl``
#: ends with ``cudaperf`` after its syntax/compile (≥ 0) and pass-rate (≥ 0) stages;
#: ``correctness``, ``kevin`` and ``fast_p:<p>`` are 0 for anything not correct.
FLOORS: Dict[str, float] = {
    "cudaperf": -1.0,
    "dhrcl": -1.0,
    "correctness": 0.0,
    "kevin": 0.0,
    "fast_p": 0.0,
}

#: Verdicts worth asking again: the server could not score the completion *now*.
RETRYABLE_VERDICTS = frozenset({"unavailable", "timeout"})

OnUnavailable = Union[str, float, int]


def floor_of(reward: Optional[str]) -> float:
    """The lowest value a candidate can earn from the preset ``reward`` (default
    ``cudaperf``); ``ValueError`` for a name that is not a preset."""
    name = reward or "cudaperf"
    key = "fast_p" if name.startswith("fast_p:") else name
    if key not in FLOORS:
        raise ValueError(f"unknown reward `{name}`: expected one of cudaperf, correctness, kevin, fast_p:<p>, dhrcl")
    return FLOORS[key]


@dataclass(frozen=True)
class NoValuePolicy:
    """A validated ``on_unavailable`` setting (see the module's docs)."""

    mode: str  # "retry", "raise" or "fallback"
    fallback: Optional[float] = None
    retry_for_s: float = 600.0
    first_backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    @staticmethod
    def of(on_unavailable: OnUnavailable, reward: Optional[str], retry_for_s: float = 600.0) -> "NoValuePolicy":
        """Checks ``on_unavailable`` against the reward asked for."""
        if not (isinstance(retry_for_s, (int, float)) and math.isfinite(retry_for_s) and retry_for_s >= 0):
            raise ValueError(f"retry_for_s must be a finite number >= 0, got {retry_for_s!r}")
        if isinstance(on_unavailable, str):
            if on_unavailable in ("retry", "raise"):
                floor_of(reward)  # the preset must exist either way
                return NoValuePolicy(on_unavailable, None, float(retry_for_s))
            raise ValueError(
                f"on_unavailable must be 'retry', 'raise' or a number below the reward's floor, got {on_unavailable!r}"
            )
        if isinstance(on_unavailable, bool) or not isinstance(on_unavailable, (int, float)):
            raise ValueError(f"on_unavailable: expected 'retry', 'raise' or a number, got {on_unavailable!r}")
        value = float(on_unavailable)
        floor = floor_of(reward)
        if not math.isfinite(value) or value >= floor:
            raise ValueError(
                f"on_unavailable={value}: a fallback must be a finite number strictly below {floor}, the lowest "
                f"value a candidate can earn from `{reward or 'cudaperf'}`; otherwise an unscorable completion "
                "would be rewarded over a wrong one"
            )
        return NoValuePolicy("fallback", value, float(retry_for_s))

    def pending(self, results: Sequence[Mapping[str, Any]]) -> List[int]:
        """Positions of results worth asking again (none unless the mode is ``retry``)."""
        if self.mode != "retry":
            return []
        return [i for i, r in enumerate(results) if r.get("value") is None and r.get("verdict") in RETRYABLE_VERDICTS]

    def resolve(self, results: List[Dict[str, Any]], what: str) -> List[Dict[str, Any]]:
        """Every result with a number: the server's value, or the fallback (marked
        ``"fallback": True``); raises :class:`CudaperfUnavailable` for the others."""
        missing = [r for r in results if r.get("value") is None]
        if not missing:
            return results
        if self.mode == "fallback":
            for r in missing:
                r["value"] = self.fallback
                r["fallback"] = True
            return results
        first = missing[0]
        after = f" after retrying for {self.retry_for_s:g} s" if self.mode == "retry" else ""
        raise CudaperfUnavailable(
            f"{what}: {len(missing)} of {len(results)} completions could not be scored{after} "
            f"(first: completion {first.get('index')}: {first.get('verdict')}: {first.get('reason')}); "
            "no number is made up: fix the server, or pass an explicit on_unavailable fallback "
            "below the reward's floor",
            missing,
        )

    def next_backoff(self, current: float) -> float:
        """The wait after ``current``: doubled, at most ``max_backoff_s``."""
        return min(current * 2.0, self.max_backoff_s)
