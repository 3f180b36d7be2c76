"""The ``vllm`` rollout backend (``slime_core.rollout_backend.RolloutBackend``).

It starts vLLM servers on the run's placement (`slime_vllm.engines.VLLMEngines`) and
generates through vLLM's token-in, token-out route (`slime_vllm.client.VLLMClient`), so
slime-core's default rollout, generate and eval functions run on vLLM unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.cluster.engine_servers import engine_count
from slime_vllm.client import VLLMClient
from slime_vllm.engines import VLLMEngines

if TYPE_CHECKING:
    from slime_core.config.config import Config


class VLLMBackend:
    """vLLM servers, one per ``--rollout-num-gpus-per-engine`` GPUs (one CPU slot each on CPU)."""

    def engine_bundles(self, config: Config, gpu: bool) -> list[dict[str, float]]:
        gpus = config.rollout_num_gpus_per_engine if gpu else 0
        return [{"GPU": gpus, "CPU": 1} if gpus else {"CPU": 1}] * engine_count(config)

    def start(self, config: Config, actor_options=None, plugins=None) -> VLLMEngines:
        import torch

        return VLLMEngines.start(config, config.hf_checkpoint, actor_options, gpu=torch.cuda.is_available())

    def client(self, url: str, api_key: str | None = None) -> VLLMClient:
        return VLLMClient(url, api_key=api_key)


#: The instance registered as rollout backend ``vllm``.
vllm_backend = VLLMBackend()
