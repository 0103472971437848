"""verl entry point: ``custom_reward_function.path=python/verl_reward.py`` with
``custom_reward_function.name=compute_score`` (or ``compute_score_batch`` with the batch
reward manager). verl loads this file by path, so it imports the installed package
(``pip install ./python``) instead of using relative imports. The server is ``CUDAPERF_URL``.
"""

from cudaperf_client import compute_score, compute_score_batch

__all__ = ["compute_score", "compute_score_batch"]
