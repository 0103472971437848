"""A verl multi-turn tool for kernel writing: ``submit_kernel(code)`` returns the verdict
and the server's feedback text as the tool response; its step reward is the change in
reward, and ``calc_reward`` the last submission's reward.

Tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)::

    tools:
      - class_name: verl_kernel_tool.CudaperfKernelTool   # this file on PYTHONPATH
        config: {type: native, reward: cudaperf}
        tool_schema:
          type: function
          function:
            name: submit_kernel
            description: Compile, check and time a CUDA kernel; returns the verdict and feedback.
            parameters:
              type: object
              properties: {code: {type: string, description: "CUDA source with its // @launch line"}}
              required: [code]

Each dataset row names its task in ``extra_info.tools_kwargs.submit_kernel.create_kwargs``
(``{"task_id": "vector_add", "step": ...}``). Needs verl (not installed here: this glue is
not run by the tests; ``python/tests/test_trainers.py`` drives ``KernelToolSessions``, which
does the work, through the same calls).
"""

from typing import Any, Optional
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

from cudaperf_client import KernelToolSessions


class CudaperfKernelTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self.sessions = KernelToolSessions(
            reward=config.get("reward"), on_unavailable=config.get("on_unavailable", "retry")
        )

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any):
        instance_id = instance_id or str(uuid4())
        await self.sessions.create(instance_id, **kwargs.get("create_kwargs", {}))
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any):
        text, step_reward, metrics = await self.sessions.execute(instance_id, parameters)
        return ToolResponse(text=text), step_reward, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return await self.sessions.calc_reward(instance_id)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        await self.sessions.release(instance_id)
