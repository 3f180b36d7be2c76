"""This rank's model: `build_model`'s, or the one ``--megatron-model-provider`` returns.

The provider is ``fn(hf_config, config, pre_process, post_process) -> GPTModel``, called in
every train rank with Megatron's parallel groups in place (``pre_process`` / ``post_process``:
whether this pipeline stage holds the embedding / the output layer). The backend loads the
Hugging Face weights of ``--hf-checkpoint`` into what it returns, so the model must have the
parameters the model family's conversion fills (`slime_megatron.models.weights`): a different
architecture needs a family of its own (`register_family`). That is checked here, with the
names that differ, before any weight is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from slime_megatron.models.build import _without_transformer_engine, build_model

if TYPE_CHECKING:
    from slime_core.config.config import Config


def provide_model(hf_config, config: Config, mtp_layers: int = 0, vp_stage: int | None = None):
    """``--megatron-model-provider``'s model for ``hf_config`` (checked), else `build_model`'s
    (with ``mtp_layers`` MTP layers, of virtual pipeline stage ``vp_stage``; a provider's model
    has neither: the options refuse both)."""
    from megatron.core import parallel_state

    from slime_core.plugins.registry import resolve_reference

    path = getattr(config, "megatron_model_provider", None)
    if not path:
        return build_model(hf_config, config, mtp_layers, vp_stage)
    provider = resolve_reference(path, "--megatron-model-provider")
    _without_transformer_engine()
    model = provider(
        hf_config,
        config,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
    )
    check_provided_model(model, hf_config, path)
    if torch.cuda.is_available():
        model.cuda(torch.cuda.current_device())
    return model


def check_provided_model(model, hf_config, path: str) -> None:
    """``model`` is a megatron module with ``hf_config``'s layers, on the run's tensor/pipeline
    layout, whose parameters are the ones ``hf_config``'s family converts; else an error naming
    what differs (`unmatched_weights` alone cannot tell a model short of layers from a
    pipeline stage)."""
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig

    from slime_megatron.models.family import model_family
    from slime_megatron.models.weights import unmatched_weights

    where = f"--megatron-model-provider {path}"
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(config, TransformerConfig):
        raise TypeError(
            f"{where} returned {type(model).__name__}, not a megatron-core model with a TransformerConfig; "
            "return a GPTModel (megatron.core.models.gpt.GPTModel)"
        )
    expected = {
        "num_layers": hf_config.num_hidden_layers,
        "tensor_model_parallel_size": parallel_state.get_tensor_model_parallel_world_size(),
        "pipeline_model_parallel_size": parallel_state.get_pipeline_model_parallel_world_size(),
    }
    wrong = [
        f"{key} {getattr(config, key)} (the run has {value})"
        for key, value in expected.items()
        if getattr(config, key) != value
    ]
    if wrong:
        raise ValueError(
            f"{where} returned a model with {', '.join(wrong)}; build its TransformerConfig from "
            "--hf-checkpoint's config.json and the run's parallel sizes"
        )
    unfilled, unknown = unmatched_weights(model, hf_config)
    if unfilled or unknown:
        family = model_family(hf_config).name
        raise ValueError(
            f"{where} returned a model the {family} weights of --hf-checkpoint do not fit: no weight for "
            f"{unfilled[:5]}, no parameter for {unknown[:5]}; build the {family} architecture "
            "(as slime_megatron.models.build_model does), or register a family for yours "
            "(slime_megatron.models.register_family)"
        )
