"""Reward functions for TRL (``reward_funcs``) and verl (``compute_score`` and friends).

Every adapter returns a number for every completion or raises: "no value" is resolved by
``on_unavailable`` (see :mod:`cudaperf_client.policy`; default: ask again within
``retry_for_s``, then raise), never handed to the trainer as ``None``.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .client import Completion, CudaperfClient
from .policy import NoValuePolicy, OnUnavailable
from .scoring import GroupKey, score_batch, score_batch_async, score_group_async

#: Presets whose value depends on the training step.
STEP_DEPENDENT = frozenset({"dhrcl"})


def trl_step(kwargs: Mapping[str, Any]) -> Optional[int]:
    """The training step as TRL passes it: ``trainer_state.global_step`` (every
    ``GRPOTrainer`` version passes ``trainer_state`` to reward functions), else a
    ``step`` column."""
    state = kwargs.get("trainer_state")
    step = getattr(state, "global_step", None)
    if step is None and isinstance(state, Mapping):
        step = state.get("global_step")
    if step is None:
        step = kwargs.get("step")
    if isinstance(step, (list, tuple)):  # a dataset column: one per completion
        step = step[0] if step else None
    return None if step is None else int(step)


def _trl_keys(kwargs: Mapping[str, Any], n: int, task_key: str, reward: Optional[str], weights: Any) -> List[GroupKey]:
    if task_key not in kwargs:
        raise KeyError(f"cudaperf reward: the dataset needs a `{task_key}` column (got {sorted(kwargs)})")
    tasks = list(kwargs[task_key])
    if len(tasks) != n:
        raise ValueError(f"cudaperf reward: {len(tasks)} values in `{task_key}` for {n} completions")
    step = trl_step(kwargs)
    if step is None and (reward or "cudaperf") in STEP_DEPENDENT:
        raise ValueError(f"cudaperf reward `{reward}` follows the training step, but TRL passed no trainer_state")
    return [GroupKey.of(t, reward, weights, step) for t in tasks]


def trl_reward(
    client: Optional[CudaperfClient] = None,
    *,
    task_key: str = "task_id",
    reward: Optional[str] = None,
    weights: Optional[Mapping[str, float]] = None,
    on_unavailable: OnUnavailable = "retry",
    retry_for_s: float = 600.0,
    name: str = "cudaperf",
) -> Callable[..., List[float]]:
    """A TRL reward function ``(prompts, completions, **kwargs) -> list[float]``.

    The dataset needs a column ``task_key`` (default ``task_id``) with the task id of each
    prompt; TRL passes it in ``kwargs``. Completions may be strings or conversational
    (lists of messages). Completions of one task go to the server as one group (one
    request per task, sent concurrently). The step comes from
    ``trainer_state.global_step`` (for the ``dhrcl`` curriculum). Always returns a number
    per completion or raises; see :mod:`cudaperf_client.policy` for ``on_unavailable``.
    """
    policy = NoValuePolicy.of(on_unavailable, reward, retry_for_s)
    client = client or CudaperfClient()

    def reward_func(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> List[float]:
        keys = _trl_keys(kwargs, len(completions), task_key, reward, weights)
        results = score_batch(client, keys, completions, policy)
        return [float(r["value"]) for r in results]

    reward_func.__name__ = name
    return reward_func


def trl_reward_async(
    client: Any = None,
    *,
    task_key: str = "task_id",
    reward: Optional[str] = None,
    weights: Optional[Mapping[str, float]] = None,
    on_unavailable: OnUnavailable = "retry",
    retry_for_s: float = 600.0,
    name: str = "cudaperf",
) -> Callable[..., Awaitable[List[float]]]:
    """:func:`trl_reward` as a coroutine function, which TRL's ``GRPOTrainer`` runs on its
    own event loop concurrently with its other async reward functions
    (``inspect.iscoroutinefunction``). ``client`` is an
    :class:`~cudaperf_client.AsyncCudaperfClient` (one is made if omitted)."""
    from .aio import AsyncCudaperfClient

    policy = NoValuePolicy.of(on_unavailable, reward, retry_for_s)
    aclient = client or AsyncCudaperfClient()

    async def reward_func(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> List[float]:
        keys = _trl_keys(kwargs, len(completions), task_key, reward, weights)
        results = await score_batch_async(aclient, keys, completions, policy)
        return [float(r["value"]) for r in results]

    reward_func.__name__ = name
    return reward_func


# ---- verl -------------------------------------------------------------------------------

_default_client: Optional[CudaperfClient] = None


def _client() -> CudaperfClient:
    global _default_client
    if _default_client is None:
        _default_client = CudaperfClient()
    return _default_client


def verl_step(extra_info: Optional[Mapping[str, Any]], kwargs: Mapping[str, Any]) -> Optional[int]:
    """The training step for verl: the item's ``extra_info`` (``step``, ``global_step`` or
    ``global_steps``), else the reward function's keyword arguments (verl's
    ``custom_reward_function.reward_kwargs``), else ``CUDAPERF_STEP``. verl itself keeps
    the step in ``RayPPOTrainer.global_steps`` and on the rollout batch's
    ``meta_info["global_steps"]``, and hands neither to reward functions."""
    for source in (extra_info or {}, kwargs):
        for k in ("step", "global_step", "global_steps"):
            if source.get(k) is not None:
                return int(source[k])
    env = os.environ.get("CUDAPERF_STEP")
    return int(env) if env else None


def _verl_settings(
    ground_truth: Any, extra_info: Optional[Mapping[str, Any]], kwargs: Mapping[str, Any]
) -> GroupKey:
    extra = extra_info or {}
    reward = extra.get("reward", kwargs.get("reward"))
    weights = extra.get("weights", kwargs.get("weights"))
    step = verl_step(extra, kwargs)
    if step is None and (reward or "cudaperf") in STEP_DEPENDENT:
        raise ValueError(
            f"cudaperf reward `{reward}` follows the training step, but none was given: put `step` in each "
            "item's extra_info (verl does not pass its global_steps to reward functions), in reward_kwargs, "
            "or in CUDAPERF_STEP"
        )
    return GroupKey.of(ground_truth, reward, weights, step)


def _verl_policy(kwargs: Mapping[str, Any], reward: Optional[str]) -> NoValuePolicy:
    return NoValuePolicy.of(kwargs.get("on_unavailable", "retry"), reward, kwargs.get("retry_for_s", 600.0))


def _verl_result(r: Mapping[str, Any], with_feedback: bool) -> Dict[str, Any]:
    # The same keys for every item: verl's managers gather each key into one column.
    out: Dict[str, Any] = {
        "score": float(r["value"]),
        "verdict": str(r["verdict"]),
        "fallback": bool(r.get("fallback", False)),
    }
    if with_feedback:
        out["feedback"] = r.get("feedback") or ""
    return out


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """verl's custom reward signature (naive reward manager): one completion per call.
    ``ground_truth`` is the task id (the dataset's ``reward_model.ground_truth``); the
    server is ``CUDAPERF_URL``. Returns ``{"score", "verdict", "fallback"}`` (plus
    ``feedback`` with ``with_feedback=True``). ``extra_info`` (or verl's ``reward_kwargs``)
    may carry ``step``, ``reward`` (a preset) and ``weights``; ``reward_kwargs`` may set
    ``on_unavailable`` and ``retry_for_s`` (see :mod:`cudaperf_client.policy`).

    One request per completion: prefer :func:`compute_score_batch` (batch manager: one
    request per group) or :func:`compute_score_async` (reward loop: concurrent calls of
    a group are sent as one request)."""
    key = _verl_settings(ground_truth, extra_info, kwargs)
    policy = _verl_policy(kwargs, key.reward)
    [r] = score_batch(_client(), [key], [solution_str], policy)
    return _verl_result(r, bool(kwargs.get("with_feedback", False)))


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
    **kwargs: Any,
) -> List[Dict[str, Any]]:
    """verl's batch reward signature (``reward_model.reward_manager=batch``). Each item's
    ``extra_info`` is read on its own (``step``, ``reward``, ``weights``); items that share
    the task and those settings go to the server as one request (a GRPO group), the
    requests sent concurrently."""
    n = len(solution_strs)
    infos = list(extra_infos) if extra_infos is not None else [None] * n
    if not (len(ground_truths) == len(infos) == n):
        raise ValueError(f"{len(ground_truths)} ground truths and {len(infos)} extra_infos for {n} solutions")
    keys = [_verl_settings(g, e, kwargs) for g, e in zip(ground_truths, infos)]
    policies = {k.reward: _verl_policy(kwargs, k.reward) for k in keys}
    # One policy per reward preset (their fallbacks are checked against their floors).
    out: List[Optional[Dict[str, Any]]] = [None] * n
    for reward, policy in policies.items():
        idx = [i for i, k in enumerate(keys) if k.reward == reward]
        results = score_batch(_client(), [keys[i] for i in idx], [solution_strs[i] for i in idx], policy)
        for i, r in zip(idx, results):
            out[i] = _verl_result(r, bool(kwargs.get("with_feedback", False)))
    return out  # type: ignore[return-value]


class _Coalescer:
    """Gathers concurrent single-completion calls of one group into one request: the
    first call of a group waits ``window_s`` (or until ``max_group`` calls arrived), then
    sends them together; each caller gets its own result."""

    def __init__(self, client: Any, window_s: float, max_group: int):
        self.client = client
        self.window_s = window_s
        self.max_group = max_group
        self.open: Dict[Tuple[GroupKey, NoValuePolicy], List[Tuple[str, "asyncio.Future[Dict[str, Any]]"]]] = {}
        self.full: Dict[Tuple[GroupKey, NoValuePolicy], asyncio.Event] = {}

    async def score(self, key: GroupKey, policy: NoValuePolicy, completion: str) -> Dict[str, Any]:
        fut: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
        slot = (key, policy)
        batch = self.open.get(slot)
        if batch is not None:
            batch.append((completion, fut))
            if len(batch) >= self.max_group:
                self.full[slot].set()
            return await fut
        batch = [(completion, fut)]
        self.open[slot] = batch
        self.full[slot] = asyncio.Event()
        try:
            await asyncio.wait_for(self.full[slot].wait(), self.window_s)
        except asyncio.TimeoutError:
            pass
        del self.open[slot], self.full[slot]
        try:
            results = await score_group_async(self.client, key, [c for c, _ in batch], policy)
            for (_, f), r in zip(batch, results):
                if not f.done():
                    f.set_result(r)
        except Exception as e:  # every caller of the group sees the failure
            for _, f in batch:
                if not f.done():
                    f.set_exception(e)
        return await fut


_coalescers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Coalescer]" = weakref.WeakKeyDictionary()


def _coalescer(kwargs: Mapping[str, Any]) -> _Coalescer:
    from .aio import AsyncCudaperfClient

    loop = asyncio.get_running_loop()
    c = _coalescers.get(loop)
    if c is None:
        c = _Coalescer(
            AsyncCudaperfClient(),
            float(kwargs.get("group_window_s", 0.02)),
            int(kwargs.get("max_group", 64)),
        )
        _coalescers[loop] = c
    return c


async def compute_score_async(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """:func:`compute_score` as a coroutine, for verl's async reward loop (its reward
    managers ``await`` a ``compute_score`` that ``inspect.iscoroutinefunction`` reports,
    one call per sample, concurrently). Calls of the same group (task, reward, weights,
    step) that arrive within ``group_window_s`` (reward_kwargs; default 0.02 s) are sent as
    one request of up to ``max_group`` (64) completions, so a group of G is one request."""
    key = _verl_settings(ground_truth, extra_info, kwargs)
    policy = _verl_policy(kwargs, key.reward)
    r = await _coalescer(kwargs).score(key, policy, solution_str)
    return _verl_result(r, bool(kwargs.get("with_feedback", False)))
