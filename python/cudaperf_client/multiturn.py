"""Multi-turn kernel writing: the policy submits a kernel, reads the server's verdict and
feedback text, and tries again.

* TRL: :class:`KernelEnvironment` for ``GRPOTrainer(environment_factory=...)``. Its public
  method ``submit_kernel(code)`` is exposed as a tool (TRL reads the type hints and the
  docstring); the returned string is the tool message the model sees next;
  ``get_reward()`` scores the rollout (TRL 1.8.0 and later call it once per rollout).
* verl: :class:`KernelToolSessions` holds the state of verl's tool protocol
  (``create`` / ``execute`` / ``calc_reward`` / ``release``, all ``async``); a
  ``verl.tools.base_tool.BaseTool`` subclass delegates to it (``python/examples/``).

Both turn a result into the same text (:func:`feedback_text`) and resolve "no value" like
the single-turn adapters (:mod:`cudaperf_client.policy`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .client import CudaperfClient
from .policy import NoValuePolicy, OnUnavailable
from .rewards import STEP_DEPENDENT
from .scoring import GroupKey, score_batch, score_group_async


def as_completion(code: str) -> str:
    """Code given to a tool, as the server reads completions: a fenced block is kept as
    is, bare source is fenced."""
    return code if "```" in code else f"```cuda\n{code}\n```"


def feedback_text(result: Mapping[str, Any]) -> str:
    """What the model reads after a submission: the verdict, the reward, and the server's
    feedback (compiler errors with line numbers, failing configurations, the speedup)."""
    head = f"Verdict: {result.get('verdict')}; reward {float(result['value']):.3f}"
    if result.get("fallback"):
        head += " (not scored: the server could not score this submission)"
    body = result.get("feedback") or result.get("reason") or ""
    return f"{head}\n{body}".rstrip()


class KernelEnvironment:
    """A TRL environment for multi-turn kernel writing (one instance per rollout).

    ``GRPOTrainer(environment_factory=lambda: KernelEnvironment(client, reward="cudaperf"))``;
    the dataset needs a ``task_key`` column (default ``task_id``). ``step`` is a callable
    giving the training step (e.g. ``lambda: trainer.state.global_step``): TRL passes
    the dataset row to ``reset``, not the trainer state. A rollout that never submits
    gets the reward of a completion without code.
    """

    def __init__(
        self,
        client: Optional[CudaperfClient] = None,
        *,
        task_key: str = "task_id",
        reward: Optional[str] = None,
        weights: Optional[Mapping[str, float]] = None,
        on_unavailable: OnUnavailable = "retry",
        retry_for_s: float = 600.0,
        step: Optional[Callable[[], Optional[int]]] = None,
    ):
        self._client = client or CudaperfClient()
        self._task_key = task_key
        self._reward = reward
        self._weights = weights
        self._policy = NoValuePolicy.of(on_unavailable, reward, retry_for_s)
        self._step = step
        self._task: Optional[str] = None
        self.results: List[Dict[str, Any]] = []

    def reset(self, **kwargs: Any) -> None:
        """Starts a rollout on the row's task (TRL calls it with the dataset row)."""
        if self._task_key not in kwargs:
            raise KeyError(f"KernelEnvironment: the dataset needs a `{self._task_key}` column (got {sorted(kwargs)})")
        self._task = str(kwargs[self._task_key])
        self.results = []
        return None

    def _key(self) -> GroupKey:
        if self._task is None:
            raise RuntimeError("KernelEnvironment: reset() was not called")
        step = self._step() if self._step is not None else None
        if step is None and (self._reward or "cudaperf") in STEP_DEPENDENT:
            raise ValueError(f"KernelEnvironment: reward `{self._reward}` follows the training step; pass step=")
        return GroupKey.of(self._task, self._reward, self._weights, step)

    def submit_kernel(self, code: str) -> str:
        """Compiles, checks and times a CUDA kernel for the current task and returns the
        verdict, the reward and feedback for the next attempt.

        Args:
            code: The complete CUDA source with its `// @launch` line, bare or in a ```cuda block.
        """
        [r] = score_batch(self._client, [self._key()], [as_completion(code)], self._policy)
        self.results.append(r)
        return feedback_text(r)

    def get_reward(self) -> float:
        """The reward of the rollout: that of its last submission."""
        if not self.results:
            [r] = score_batch(self._client, [self._key()], [""], self._policy)
            self.results.append(r)
        return float(self.results[-1]["value"])


class KernelToolSessions:
    """The state behind a verl multi-turn tool (one session per rollout).

    verl's tool protocol is ``create(instance_id, **create_kwargs)``, ``execute(instance_id,
    parameters) -> (ToolResponse, step_reward, metrics)``, ``calc_reward(instance_id)``,
    ``release(instance_id)``; the dataset gives each rollout its task through
    ``extra_info.tools_kwargs.<tool>.create_kwargs`` (here ``{"task_id": ...}``, or
    ``ground_truth``). ``execute`` returns ``(text, reward, metrics)``; the step reward is
    the change in reward since the session's previous submission, so within one session
    the turn rewards add up to the last submission's reward (verl's ``ToolAgentLoop`` at
    b178a3c opens a session per call, so there each step reward is that call's reward).
    """

    def __init__(
        self,
        client: Any = None,
        *,
        reward: Optional[str] = None,
        weights: Optional[Mapping[str, float]] = None,
        on_unavailable: OnUnavailable = "retry",
        retry_for_s: float = 600.0,
    ):
        from .aio import AsyncCudaperfClient

        self.client = client or AsyncCudaperfClient()
        self.reward = reward
        self.weights = weights
        self.policy = NoValuePolicy.of(on_unavailable, reward, retry_for_s)
        self.sessions: Dict[str, Dict[str, Any]] = {}

    async def create(self, instance_id: str, **create_kwargs: Any) -> None:
        """Opens a session for one rollout (``task_id`` or ``ground_truth``; ``step``)."""
        task = create_kwargs.get("task_id", create_kwargs.get("ground_truth"))
        if task is None:
            raise KeyError(f"cudaperf tool: create_kwargs need `task_id` (got {sorted(create_kwargs)})")
        step = create_kwargs.get("step")
        if step is None and (self.reward or "cudaperf") in STEP_DEPENDENT:
            raise ValueError(f"cudaperf tool: reward `{self.reward}` follows the training step; pass `step`")
        self.sessions[instance_id] = {"key": GroupKey.of(task, self.reward, self.weights, step), "results": []}

    async def execute(self, instance_id: str, parameters: Mapping[str, Any]) -> Tuple[str, float, Dict[str, Any]]:
        """Scores ``parameters["code"]``; returns the text for the model, the step reward
        and metrics (``verdict``, ``reward``, ``attempt``)."""
        s = self.sessions[instance_id]
        code = parameters.get("code")
        if not isinstance(code, str):
            return "The tool needs a `code` string with the CUDA source.", 0.0, {"verdict": "bad_call"}
        [r] = await score_group_async(self.client, s["key"], [as_completion(code)], self.policy)
        before = s["results"][-1]["value"] if s["results"] else 0.0
        s["results"].append(r)
        metrics = {"verdict": r["verdict"], "reward": float(r["value"]), "attempt": len(s["results"])}
        return feedback_text(r), float(r["value"]) - float(before), metrics

    async def calc_reward(self, instance_id: str) -> float:
        """The last submission's reward (that of a completion without code if none)."""
        s = self.sessions[instance_id]
        if not s["results"]:
            [r] = await score_group_async(self.client, s["key"], [""], self.policy)
            s["results"].append(r)
        return float(s["results"][-1]["value"])

    async def release(self, instance_id: str) -> None:
        """Forgets a session."""
        self.sessions.pop(instance_id, None)
