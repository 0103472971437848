"""verl entry point: ``custom_reward_function.path=python/verl_reward.py`` with
``custom_reward_function.name`` = ``compute_score_batch`` (batch reward manager: one
request per group), ``compute_score_async`` (async reward loop) or ``compute_score``
(naive manager). verl loads this file by path, so it imports the installed package
(``pip install ./python``; ``./python[async]`` for ``compute_score_async``) instead of
using relative imports. The server is ``CUDAPERF_URL``.
"""

from cudaperf_client import compute_score, compute_score_async, compute_score_batch

__all__ = ["compute_score", "compute_score_async", "compute_score_batch"]
