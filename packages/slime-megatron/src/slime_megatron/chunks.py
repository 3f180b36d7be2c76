"""A rank's model chunks: one per virtual pipeline stage, or one without them.

With ``--num-layers-per-virtual-pipeline-stage`` megatron-core's interleaved schedule runs
several model chunks on each pipeline rank (chunk ``i`` of pipeline rank ``r`` holds virtual
stage ``i × P + r``: the first chunk of the first rank has the embedding, the last chunk of the
last rank the output layer), and its schedules, optimizer and ``finalize_model_grads`` take
them as a list. `ModelChunks` is that list as one module, so the rank handles one chunk and
several alike: ``parameters()``, ``named_parameters()`` (names prefixed by the chunk's index),
``train()`` and ``eval()`` span every chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_megatron.models.weights import unwrap

if TYPE_CHECKING:
    from slime_core.config.config import Config


class ModelChunks(torch.nn.ModuleList):
    """The model chunks of one rank, in virtual-stage order (DDP-wrapped for the policy)."""

    @property
    def module(self) -> torch.nn.ModuleList:
        """The GPTModels inside the wrappers, as one module (what the weights are loaded into)."""
        return torch.nn.ModuleList([unwrap(chunk) for chunk in self])

    @property
    def config(self):
        """The chunks' TransformerConfig (the same settings in each)."""
        return unwrap(self[0]).config

    def zero_grad_buffer(self) -> None:
        """Zero every chunk's DDP gradient buffers."""
        for chunk in self:
            chunk.zero_grad_buffer()


def build_chunks(hf_config, config: Config, mtp_layers: int = 0) -> ModelChunks:
    """This rank's model chunks of ``hf_config`` (`slime_megatron.models.provide_model`): one per
    virtual pipeline stage, or one."""
    from megatron.core import parallel_state

    from slime_megatron.models import provide_model

    virtual = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    stages = range(virtual) if virtual else [None]
    return ModelChunks(provide_model(hf_config, config, mtp_layers, vp_stage=stage) for stage in stages)
