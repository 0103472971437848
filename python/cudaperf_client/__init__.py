"""Client for ``cudaperf serve``: CUDA-kernel rewards for Python RL trainers.

* :class:`CudaperfClient` — ``score``, ``tasks``, ``task``, ``health``, ``metrics``.
* :func:`trl_reward` — a TRL ``reward_funcs`` entry ``(prompts, completions, **kwargs)``.
* :func:`compute_score` / :func:`compute_score_batch` — verl's custom reward signatures.
"""

from .client import CudaperfClient, CudaperfError, CudaperfUnavailable, completion_text
from .rewards import compute_score, compute_score_batch, score_by_task, trl_reward

__all__ = [
    "CudaperfClient",
    "CudaperfError",
    "CudaperfUnavailable",
    "completion_text",
    "compute_score",
    "compute_score_batch",
    "score_by_task",
    "trl_reward",
]
__version__ = "0.1.0"
