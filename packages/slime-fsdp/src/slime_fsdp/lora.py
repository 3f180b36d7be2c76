"""LoRA (``--lora-rank`` > 0): rank-r adapters trained by peft over the frozen base model.

peft injects its layers into the Hugging Face model in place (`apply_lora`): a target
``Linear`` at ``X`` keeps its weight as ``X.base_layer.weight`` and gains ``X.lora_A.default.weight``
(r, in) and ``X.lora_B.default.weight`` (out, r), the latter zero at the start, so the policy
starts as the base model. Only the adapter trains; the optimizer keeps state for it alone.

Around the sharded model, three views use Hugging Face names again:
- engines that load adapters (the CPU engine) get the adapter alone (`adapter_bucket`:
  ``X.lora_A.weight``, ``X.lora_B.weight``, ``X.lora_scaling``) and merge it into their base;
  the others get merged weights ``W + (alpha / r) B A`` under ``X.weight`` (`merge_bucket`),
  which they serve as they would a fully fine-tuned model;
- checkpoints hold the adapter and its optimizer state only (`slime_fsdp.checkpoint`): the base
  comes from ``--hf-checkpoint`` on resume;
- ``--save-hf`` writes a peft adapter directory (`save_adapter`) that
  ``peft.PeftModel.from_pretrained(base, path)`` loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: The names slime's Megatron-Bridge LoRA pull request (THUDM/slime#1865) takes for
#: --lora-target-modules, and the Hugging Face modules they are on the FSDP backend.
MEGATRON_TARGETS = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}
ADAPTER = "default"
BASE = ".base_layer."


def enabled(config: Config) -> bool:
    return bool(config.get("lora_rank"))


def lora_config(config: Config):
    """peft's ``LoraConfig`` from ``--lora-rank/--lora-alpha/--lora-dropout/--lora-target-modules``."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=target_modules(config.lora_target_modules),
        base_model_name_or_path=config.hf_checkpoint,
        task_type="CAUSAL_LM",
    )


def target_modules(names: list[str]) -> str | list[str]:
    """``all-linear`` as it is (peft: every Linear but the output head); Megatron names turned
    into the Hugging Face module names they cover; any other name as it is."""
    if names == ["all-linear"]:
        return "all-linear"
    return [hf for name in names for hf in MEGATRON_TARGETS.get(name, (name,))]


def apply_lora(model, config: Config):
    """Inject the adapter into ``model`` (in place, before sharding); only the adapter trains."""
    from peft import inject_adapter_in_model
    from peft.tuners.lora import Linear

    inject_adapter_in_model(lora_config(config), model, adapter_name=ADAPTER)
    adapted = [name for name, module in model.named_modules() if hasattr(module, "lora_A")]
    others = [name for name in adapted if not isinstance(model.get_submodule(name), Linear)]
    if not adapted or others:
        raise ValueError(
            f"--lora-target-modules {' '.join(config.lora_target_modules)}: "
            + (f"{others[0]} is not a Linear layer" if others else "matches no module of the model")
            + "; name Linear modules (e.g. q_proj v_proj, or all-linear)"
        )
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(is_adapter(name))
    return model


def export_unit(name: str) -> str:
    """The group ``name`` is exported with: a LoRA layer's base weight, bias and adapter
    together (`merge_bucket` needs all of them), every other parameter alone."""
    if BASE in name:
        return name.split(BASE)[0]
    return name.split(".lora_")[0] if ".lora_" in name else name


def merge_bucket(bucket: list[tuple[str, torch.Tensor]], scaling: float) -> list[tuple[str, torch.Tensor]]:
    """Full tensors under peft's names -> under Hugging Face names, each adapted weight merged:
    ``X.weight = X.base_layer.weight + scaling * X.lora_B @ X.lora_A`` (computed in float32)."""
    tensors = dict(bucket)
    out = []
    for name, tensor in bucket:
        if ".lora_" in name:
            continue
        if BASE in name:
            prefix, leaf = name.split(BASE)
            if leaf == "weight":
                a = tensors[f"{prefix}.lora_A.{ADAPTER}.weight"].float()
                b = tensors[f"{prefix}.lora_B.{ADAPTER}.weight"].float()
                tensor = (tensor.float() + scaling * (b @ a)).to(tensor.dtype)
            name = f"{prefix}.{leaf}"
        out.append((name, tensor))
    return out


def adapter_bucket(bucket: list[tuple[str, torch.Tensor]], scaling: float) -> list[tuple[str, torch.Tensor]]:
    """Full adapter tensors under peft's names -> under the names the CPU engine merges
    (`slime_sglang.cpu_engine.adapters`): ``X.lora_A.weight``, ``X.lora_B.weight`` and, once per
    module, ``X.lora_scaling`` (float64: the merge multiplies by the same number as `merge_bucket`)."""
    out = []
    for name, tensor in bucket:
        out.append((name.replace(f".{ADAPTER}.", "."), tensor))
        if ".lora_A." in name:
            out.append((f"{name.split('.lora_A.')[0]}.lora_scaling", torch.tensor(scaling, dtype=torch.float64)))
    return out


def is_adapter(name: str) -> bool:
    return ".lora_" in name


def scaling(config: Config) -> float:
    """peft's ``lora_alpha / r``: the factor of ``B A`` in the forward pass and in the merge."""
    return config.lora_alpha / config.lora_rank


def injected_names(state: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict under the names of ``model`` with its adapter injected
    (``X.weight`` -> ``X.base_layer.weight`` for an adapted ``X``), to load base weights."""
    adapted = {name.split(BASE)[0] for name, _ in model.named_parameters() if BASE in name}
    out = {}
    for key, value in state.items():
        prefix, _, leaf = key.rpartition(".")
        out[f"{prefix}{BASE}{leaf}" if prefix in adapted else key] = value
    return out


def save_adapter(path: str, model, config: Config, tokenizer) -> None:
    """A peft adapter directory (``adapter_config.json``, ``adapter_model.safetensors``, the
    tokenizer) that ``PeftModel.from_pretrained(base, path)`` loads; gathered on rank 0, written there."""
    import torch.distributed as dist
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    adapter = get_model_state_dict(model, options=options)
    if dist.get_rank() == 0:
        # peft's file format: the PeftModel's prefix, no adapter name
        tensors = {f"base_model.model.{k.replace(f'.{ADAPTER}.', '.')}": v.contiguous() for k, v in adapter.items()}
        lora_config(config).save_pretrained(path)
        save_file(tensors, f"{path}/adapter_model.safetensors", metadata={"format": "pt"})
        tokenizer.save_pretrained(path)
    dist.barrier()
