"""LoRA adapters pushed to the CPU engine, merged into its running copy of the base weights.

A trainer with LoRA (``--lora-rank``) sends only its adapter: for each adapted Linear ``X``
the tensors ``X.lora_A.weight`` (r, in), ``X.lora_B.weight`` (out, r) and ``X.lora_scaling``
(a scalar: alpha / r), among the named tensors of any weight update (tensor bucket,
broadcast, a delta-synced local checkpoint), or as a peft adapter directory
(``adapter_config.json`` + ``adapter_model.safetensors``, what ``--save-hf`` writes) given to
``/update_weights_from_disk``. The engine keeps the base ``X.weight`` it held before the
first adapter arrived and serves ``X.weight = base + scaling * B @ A`` (float32, as the
trainer merges), so each adapter update replaces the previous one instead of adding to it.
A plain update of ``X.weight`` replaces the weight and forgets its base (the sender now owns
the whole weight). Every request sees the one adapter: there is no per-request ``lora_path``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

NamedTensors = list[tuple[str, torch.Tensor]]
PART = re.compile(r"^(?P<module>.+)\.lora_(?P<part>A\.weight|B\.weight|scaling)$")
PARTS = ("A.weight", "B.weight", "scaling")
PEFT_PREFIX = "base_model.model."  # peft's file names: the PeftModel's prefix before the model's names


def split(named: NamedTensors) -> tuple[NamedTensors, dict[str, dict[str, torch.Tensor]]]:
    """The plain ``(name, tensor)`` pairs, and the adapter's parts by adapted module."""
    plain: NamedTensors = []
    adapters: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in named:
        match = PART.match(name)
        if match:
            adapters.setdefault(match["module"], {})[match["part"]] = tensor
        else:
            plain.append((name, tensor))
    return plain, adapters


def problem(parameters: dict[str, torch.Tensor], adapters: dict[str, dict[str, torch.Tensor]]) -> str | None:
    """What is wrong with merging ``adapters`` into ``parameters`` (None when nothing is)."""
    for module, parts in adapters.items():
        missing = [f"{module}.lora_{part}" for part in PARTS if part not in parts]
        if missing:
            return (
                f"the adapter lacks {', '.join(missing)}; send lora_A.weight (r, in), lora_B.weight (out, r) and "
                "lora_scaling (alpha / r) of each adapted module in the same update"
            )
        weight = parameters.get(f"{module}.weight")
        if weight is None or weight.dim() != 2:
            return (
                f"adapter for {module}: the model has no Linear weight {module}.weight (an adapter of another model?)"
            )
        a, b, scaling = (parts[part] for part in PARTS)
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1] or (b.shape[0], a.shape[1]) != weight.shape:
            return (
                f"adapter for {module}: lora_B {tuple(b.shape)} @ lora_A {tuple(a.shape)} does not give the "
                f"weight's shape {tuple(weight.shape)}"
            )
        if scaling.numel() != 1:
            return (
                f"adapter for {module}: lora_scaling must be one number (alpha / r), got shape {tuple(scaling.shape)}"
            )
    return None


def merge(parameters: dict[str, torch.Tensor], adapters: dict[str, dict[str, torch.Tensor]], base: dict) -> None:
    """``X.weight = base + scaling * B @ A`` for each checked adapted module; ``base`` (name ->
    tensor) keeps each weight as it was before its first adapter."""
    with torch.no_grad():
        for module, parts in adapters.items():
            weight = parameters[f"{module}.weight"]
            original = base.setdefault(f"{module}.weight", weight.detach().clone())
            update = float(parts["scaling"]) * (parts["B.weight"].float() @ parts["A.weight"].float())
            weight.copy_(original.float() + update)


def is_peft_adapter(path: str) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def read_peft_adapter(path: str) -> NamedTensors:
    """A peft LoRA adapter directory as the named tensors of an adapter update (its scaling from
    ``adapter_config.json``); ``ValueError`` for a configuration the merge cannot follow."""
    from safetensors.torch import load_file

    config = json.loads((Path(path) / "adapter_config.json").read_text())
    unsupported = [key for key in ("rank_pattern", "alpha_pattern", "modules_to_save") if config.get(key)]
    if config.get("peft_type", "LORA") != "LORA" or unsupported:
        raise ValueError(
            f"{path}: the CPU engine loads plain LoRA adapters (one rank and alpha, no modules_to_save); this one "
            f"has {', '.join(unsupported) or 'peft_type ' + str(config.get('peft_type'))}"
        )
    r, alpha = config["r"], config["lora_alpha"]
    scaling = alpha / r**0.5 if config.get("use_rslora") else alpha / r
    tensors = load_file(str(Path(path) / "adapter_model.safetensors"))
    named = [(name.removeprefix(PEFT_PREFIX), tensor) for name, tensor in tensors.items()]
    modules = {match["module"] for name, _ in named if (match := PART.match(name))}
    return named + [(f"{module}.lora_scaling", torch.tensor(scaling, dtype=torch.float64)) for module in modules]
