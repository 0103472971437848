"""Reward functions for TRL (``reward_funcs``) and verl (``compute_score``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .client import Completion, CudaperfClient, CudaperfError, CudaperfUnavailable


def _step_of(kwargs: Mapping[str, Any]) -> Optional[int]:
    state = kwargs.get("trainer_state")
    step = getattr(state, "global_step", None)
    if step is None and isinstance(state, Mapping):
        step = state.get("global_step")
    if step is None:
        step = kwargs.get("step")
    return None if step is None else int(step)


def score_by_task(
    client: CudaperfClient,
    task_ids: Sequence[Any],
    completions: Sequence[Completion],
    *,
    step: Optional[int] = None,
    reward: Optional[str] = None,
    weights: Optional[Mapping[str, float]] = None,
    max_workers: int = 8,
    report: bool = False,
) -> List[Dict[str, Any]]:
    """Scores completions that may belong to several tasks: one request per task (a
    trainer's group goes through the pipeline together), sent concurrently; returns one
    result per completion in the order given."""
    if len(task_ids) != len(completions):
        raise ValueError(f"{len(task_ids)} task ids for {len(completions)} completions")
    groups: Dict[str, List[int]] = {}
    for i, t in enumerate(task_ids):
        groups.setdefault(str(t), []).append(i)

    def one(item):
        task, idx = item
        answer = client.score(
            task, [completions[i] for i in idx], step=step, reward=reward, weights=weights, report=report
        )
        return idx, answer["results"]

    out: List[Optional[Dict[str, Any]]] = [None] * len(completions)
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(groups) or 1))) as pool:
        for idx, results in pool.map(one, groups.items()):
            for i, r in zip(idx, results):
                out[i] = r
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
        raise CudaperfError(0, f"the server answered no result for completions {missing}")
    return out  # type: ignore[return-value]


def trl_reward(
    client: Optional[CudaperfClient] = None,
    *,
    task_key: str = "task_id",
    reward: Optional[str] = None,
    weights: Optional[Mapping[str, float]] = None,
    on_unavailable: str = "none",
    name: str = "cudaperf",
) -> Callable[..., List[Optional[float]]]:
    """A TRL reward function ``(prompts, completions, **kwargs) -> list[float]``.

    The dataset needs a column ``task_key`` (default ``task_id``) with the task id of each
    prompt; TRL passes it in ``kwargs``. Completions may be strings or conversational
    (lists of messages). The training step is read from ``trainer_state.global_step`` when
    TRL passes it (for the ``dhrcl`` curriculum). A completion the server could not score
    (``value`` null, e.g. no GPU) gives ``None`` — TRL leaves such rewards out — or raises
    ``CudaperfUnavailable`` with ``on_unavailable="raise"``.
    """
    if on_unavailable not in ("none", "raise"):
        raise ValueError("on_unavailable must be 'none' or 'raise'")
    client = client or CudaperfClient()

    def reward_func(prompts, completions, **kwargs) -> List[Optional[float]]:
        if task_key not in kwargs:
            raise KeyError(
                f"cudaperf reward: the dataset needs a `{task_key}` column (got {sorted(kwargs)})"
            )
        results = score_by_task(
            client, kwargs[task_key], completions, step=_step_of(kwargs), reward=reward, weights=weights
        )
        values: List[Optional[float]] = []
        for r in results:
            if r["value"] is None and on_unavailable == "raise":
                raise CudaperfUnavailable(0, f"completion {r['index']}: {r['verdict']}: {r.get('reason')}")
            values.append(r["value"])
        return values

    reward_func.__name__ = name
    return reward_func


_default_client: Optional[CudaperfClient] = None


def _client() -> CudaperfClient:
    global _default_client
    if _default_client is None:
        _default_client = CudaperfClient()
    return _default_client


def _verl_result(r: Mapping[str, Any]) -> Dict[str, Any]:
    if r["value"] is None:
        raise CudaperfUnavailable(0, f"{r['verdict']}: {r.get('reason')}")
    return {"score": float(r["value"]), "verdict": r["verdict"]}


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Optional[Mapping[str, Any]] = None, **kwargs
) -> Dict[str, Any]:
    """verl's custom reward signature. ``ground_truth`` is the task id (the dataset's
    ``reward_model.ground_truth``); the server is ``CUDAPERF_URL``. Returns
    ``{"score": value, "verdict": ...}`` (verl logs the extra keys); raises
    ``CudaperfUnavailable`` when the completion cannot be scored (no made-up number).
    ``extra_info`` may carry ``step``, ``reward`` (a preset name) and ``weights``."""
    extra = dict(extra_info or {})
    answer = _client().score(
        str(ground_truth),
        [solution_str],
        step=extra.get("step"),
        reward=extra.get("reward"),
        weights=extra.get("weights"),
        report=False,
    )
    return _verl_result(answer["results"][0])


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
    **kwargs,
) -> List[Dict[str, Any]]:
    """verl's batch reward signature (``reward_model.reward_manager=batch``): groups the
    batch by task so each group is scored together."""
    first = dict((extra_infos or [None])[0] or {})
    results = score_by_task(
        _client(),
        list(ground_truths),
        list(solution_strs),
        step=first.get("step"),
        reward=first.get("reward"),
        weights=first.get("weights"),
    )
    return [_verl_result(r) for r in results]
