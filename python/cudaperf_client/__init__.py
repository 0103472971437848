"""Client for ``cudaperf serve``: CUDA-kernel rewards for Python RL trainers.

* :class:`CudaperfClient` (standard library) and :class:`AsyncCudaperfClient` (aiohttp,
  ``pip install './python[async]'``) — ``score``, ``tasks``, ``task``, ``health``, ``metrics``.
* TRL: :func:`trl_reward` / :func:`trl_reward_async` for ``reward_funcs``;
  :class:`KernelEnvironment` for ``environment_factory`` (multi-turn).
* verl: :func:`compute_score` (naive manager), :func:`compute_score_batch` (batch
  manager), :func:`compute_score_async` (async reward loop); :class:`KernelToolSessions`
  behind a multi-turn tool.

No adapter hands a trainer ``None`` or a made-up number for a completion that could not
be scored: see :mod:`cudaperf_client.policy`.
"""

from .aio import AsyncCudaperfClient
from .client import CudaperfClient, CudaperfError, CudaperfUnavailable, completion_text
from .multiturn import KernelEnvironment, KernelToolSessions, feedback_text
from .policy import FLOORS, NoValuePolicy, floor_of
from .rewards import (
    compute_score,
    compute_score_async,
    compute_score_batch,
    trl_reward,
    trl_reward_async,
)

__all__ = [
    "AsyncCudaperfClient",
    "CudaperfClient",
    "CudaperfError",
    "CudaperfUnavailable",
    "FLOORS",
    "KernelEnvironment",
    "KernelToolSessions",
    "NoValuePolicy",
    "completion_text",
    "compute_score",
    "compute_score_async",
    "compute_score_batch",
    "feedback_text",
    "floor_of",
    "trl_reward",
    "trl_reward_async",
]
__version__ = "0.2.0"
