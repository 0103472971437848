"""Multi-turn kernel writing with TRL's GRPOTrainer (``environment_factory``; TRL 1.8.0 or
later for the environment's ``get_reward``): the model calls ``submit_kernel(code)``,
reads the verdict and the server's feedback (compiler errors with line numbers, failing
configurations, speed), and may try again; the rollout's reward is its last submission's.

Needs ``pip install trl transformers datasets`` and a running ``cudaperf serve``
(``CUDAPERF_URL``, default http://127.0.0.1:8000). Not run by the tests (no TRL here);
``python/tests/test_trainers.py`` drives ``KernelEnvironment`` the way TRL does.
"""

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from cudaperf_client import CudaperfClient, KernelEnvironment

client = CudaperfClient()
tasks = [t["id"] for t in client.tasks()]
prompts = [
    [{"role": "user", "content": client.task(t)["prompt"] + "\nSubmit your kernel with the submit_kernel tool."}]
    for t in tasks
]
dataset = Dataset.from_dict({"prompt": prompts, "task_id": tasks})

trainer = None  # the environment reads the trainer's step for the dhrcl curriculum


def make_env() -> KernelEnvironment:
    return KernelEnvironment(
        client,
        reward="dhrcl",
        step=lambda: trainer.state.global_step if trainer is not None else 0,
    )


trainer = GRPOTrainer(
    model="Qwen/Qwen3-0.6B",
    environment_factory=make_env,
    train_dataset=dataset,
    args=GRPOConfig(output_dir="grpo-cudaperf", num_generations=8, max_tool_calling_iterations=4),
)
trainer.train()
