"""Hugging Face ⇄ Megatron weights: pure conversions of full tensors, sharding for a rank,
loading a rank's shards, and exporting gathered Hugging Face tensors.

"Hugging Face names" are checkpoint names (``model.layers.0.mlp.experts.3.gate_proj.weight``,
what ``save_pretrained`` writes and SGLang loads). The full megatron state uses megatron's
names with global layer and expert indices (one pipeline stage, one expert-parallel rank);
:func:`shard_for_rank` turns it into one rank's local names and shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from slime_megatron.models.family import model_family, num_routed_experts
from slime_megatron.models.mtp import mtp_rules
from slime_megatron.models.weight_map import Heads, WeightRule, fuse, shard, unfuse, unshard

_EXPERT = re.compile(r"local_experts\.(\d+)\.")
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


@dataclass(frozen=True)
class Ranks:
    """Where a rank sits in the tensor-, expert- and pipeline-parallel groups."""

    tp_rank: int = 0
    tp_size: int = 1
    ep_rank: int = 0
    ep_size: int = 1
    etp_rank: int = 0  # tensor parallelism inside each expert
    etp_size: int = 1
    layer_offset: int = 0  # global index of this pipeline stage's first layer
    num_layers: int | None = None  # layers on this stage (None: all)
    first_stage: bool = True  # the stage holds the embedding
    last_stage: bool = True  # the stage holds the final norm and the output layer

    @classmethod
    def current(cls, model) -> Ranks:
        """This process's ranks, from megatron's parallel state and ``model``'s stage (its
        virtual stage: one model chunk of the interleaved schedule)."""
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

        return cls(
            ps.get_tensor_model_parallel_rank(),
            ps.get_tensor_model_parallel_world_size(),
            ps.get_expert_model_parallel_rank(),
            ps.get_expert_model_parallel_world_size(),
            ps.get_expert_tensor_parallel_rank(),
            ps.get_expert_tensor_parallel_world_size(),
            get_transformer_layer_offset(model.config, vp_stage=getattr(model, "vp_stage", None)),
            len(model.decoder.layers),
            model.pre_process,
            model.post_process,
        )


# ------------------------------------------------------------------ pure conversions


def hf_to_megatron(hf_state: Mapping[str, torch.Tensor], hf_config, mtp_layers: int = 0) -> dict[str, torch.Tensor]:
    """The full megatron state of a Hugging Face state dict (checkpoint names, or a
    transformers model's ``state_dict()``, whose MoE experts are fused), with its first
    ``mtp_layers`` multi-token prediction layers (`slime_megatron.models.mtp`)."""
    hf_state = split_fused_experts(hf_state, hf_config)
    heads = Heads.of(hf_config)
    return {
        rule.megatron: fuse(rule, [hf_state[name] for name in rule.hf], heads)
        for rule in loading_rules(hf_config, mtp_layers)
    }


def megatron_to_hf(
    megatron_state: Mapping[str, torch.Tensor], hf_config, mtp_layers: int = 0
) -> dict[str, torch.Tensor]:
    """The Hugging Face state dict (checkpoint names) of a full megatron state, with its
    first ``mtp_layers`` multi-token prediction layers."""
    heads = Heads.of(hf_config)
    out = {}
    for rule in _rules(hf_config, mtp_layers):
        out.update(zip(rule.hf, unfuse(rule, megatron_state[rule.megatron], heads)))
    return out


def shard_for_rank(
    megatron_state: Mapping[str, torch.Tensor], hf_config, ranks: Ranks, mtp_layers: int = 0
) -> dict[str, torch.Tensor]:
    """One rank's part of a full megatron state: its tensor-parallel shards, its experts
    (renumbered locally) and its pipeline stage's layers (renumbered from 0)."""
    out = {}
    for rule in loading_rules(hf_config, mtp_layers):
        name = local_name(rule, hf_config, ranks)
        if name is not None:
            out[name] = _shard(rule, megatron_state[rule.megatron], ranks)
    return out


def local_name(rule: WeightRule, hf_config, ranks: Ranks) -> str | None:
    """``rule``'s parameter name on the rank ``ranks``, or None if it lives elsewhere."""
    name = rule.megatron
    layer = _LAYER.match(name)
    if layer:
        index = int(layer.group(1)) - ranks.layer_offset
        if index < 0 or (ranks.num_layers is not None and index >= ranks.num_layers):
            return None
        name = f"decoder.layers.{index}." + name[layer.end() :]
    elif ranks.num_layers is not None and not (
        ranks.first_stage if name.startswith("embedding.") else ranks.last_stage
    ):
        return None  # the embedding lives on the first stage, the final norm and output layer on the last
    if rule.expert is not None:
        per_rank = num_routed_experts(hf_config) // ranks.ep_size
        if rule.expert // per_rank != ranks.ep_rank:
            return None
        name = _EXPERT.sub(f"local_experts.{rule.expert % per_rank}.", name)
    return name


def _shard(rule: WeightRule, tensor: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    if rule.expert is not None:
        return shard(rule, tensor, ranks.etp_rank, ranks.etp_size)
    return shard(rule, tensor, ranks.tp_rank, ranks.tp_size)


def split_fused_experts(hf_state: Mapping[str, torch.Tensor], hf_config) -> Mapping[str, torch.Tensor]:
    """transformers 5 keeps a MoE layer's experts fused in memory (``experts.gate_up_proj``
    (E, 2I, H), ``experts.down_proj`` (E, H, I)); split them into checkpoint names."""
    fused = [name for name in hf_state if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")]
    if not fused:
        return hf_state
    out = {name: t for name, t in hf_state.items() if name not in fused}
    for name in fused:
        prefix, kind = name.rsplit(".", 1)
        for e, tensor in enumerate(hf_state[name]):
            if kind == "gate_up_proj":
                out[f"{prefix}.{e}.gate_proj.weight"], out[f"{prefix}.{e}.up_proj.weight"] = tensor.chunk(2, dim=0)
            else:
                out[f"{prefix}.{e}.down_proj.weight"] = tensor
    return out


def _rules(hf_config, mtp_layers: int = 0) -> list[WeightRule]:
    """Every rule of the model with ``mtp_layers`` MTP layers; exporting follows all of them."""
    rules = model_family(hf_config).weight_rules(hf_config)
    return rules + mtp_rules(hf_config, mtp_layers) if mtp_layers else rules


def loading_rules(hf_config, mtp_layers: int = 0) -> list[WeightRule]:
    """The rule that fills each megatron parameter: the first of `_rules` that names it (an
    MTP layer's ``shared_head.head`` is exported from the output layer, never loaded into it)."""
    first: dict[str, WeightRule] = {}
    for rule in _rules(hf_config, mtp_layers):
        first.setdefault(rule.megatron, rule)
    return list(first.values())


def model_mtp_layers(model) -> int:
    """The MTP layers of a GPTModel (unwrapped) on this pipeline stage (0 without)."""
    return len(model.mtp.layers) if getattr(model, "mtp_process", False) else 0


# ------------------------------------------------------------------ loading a rank's shards


def load_hf_weights(model, hf_dir_or_state_dict, hf_config) -> None:
    """Copy this rank's shards of Hugging Face weights into ``model`` (a GPTModel, or one
    wrapped by DDP / Float16Module, or a list of them: the model chunks of virtual pipeline
    stages): from a directory of ``*.safetensors`` files (each tensor read only if this rank
    needs it) or an in-memory state dict.

    Raises if ``model`` has a weight the conversion did not fill, or the source lacks one.
    """
    for chunk in model_chunks(model):
        _load_chunk(chunk, hf_dir_or_state_dict, hf_config)


def _load_chunk(model, hf_dir_or_state_dict, hf_config) -> None:
    unfilled, unknown = unmatched_weights(model, hf_config)
    if unfilled or unknown:
        raise RuntimeError(
            f"the {model_family(hf_config).name} conversion does not match the built model: "
            f"unfilled {unfilled[:5]}, unknown {unknown[:5]}"
        )
    source = (
        _SafetensorsDir(hf_dir_or_state_dict)
        if isinstance(hf_dir_or_state_dict, (str, Path))
        else split_fused_experts(hf_dir_or_state_dict, hf_config)
    )
    ranks, heads = Ranks.current(model), Heads.of(hf_config)
    local = {
        name: _shard(rule, fuse(rule, [_read(source, n) for n in rule.hf], heads), ranks)
        for name, rule in _local_rules(model, hf_config).items()
    }
    model.load_state_dict(local, strict=False)


def unmatched_weights(model, hf_config) -> tuple[list[str], list[str]]:
    """The parameters of ``model`` (this rank's part) that the conversion of ``hf_config``'s
    family does not fill, and the names it fills that ``model`` does not have (both sorted)."""
    model = unwrap(model)
    filled = set(_local_rules(model, hf_config))
    expected = {name for name in model.state_dict() if not name.endswith("_extra_state")}
    return sorted(expected - filled), sorted(filled - expected)


def _local_rules(model, hf_config) -> dict[str, WeightRule]:
    """This rank's parameter names, each with the rule that fills it."""
    ranks = Ranks.current(model)
    named = ((local_name(rule, hf_config, ranks), rule) for rule in _rules_with_tied_output(model, hf_config))
    return {name: rule for name, rule in named if name is not None}


def _rules_with_tied_output(model, hf_config) -> list[WeightRule]:
    """With tied embeddings split over pipeline stages, the last stage keeps its own copy
    of the embedding as ``output_layer.weight``."""
    rules = loading_rules(hf_config, model_mtp_layers(model))
    if hf_config.tie_word_embeddings and "output_layer.weight" in model.state_dict():
        rules.append(WeightRule("output_layer.weight", ("model.embed_tokens.weight",), "column"))
    return rules


class _SafetensorsDir:
    """The tensors of a Hugging Face directory's ``*.safetensors`` files, read on demand."""

    def __init__(self, directory):
        from safetensors import safe_open

        files = sorted(Path(directory).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory} has no *.safetensors files; give a Hugging Face model directory")
        self.handles = [safe_open(str(f), framework="pt") for f in files]
        self.where = {name: handle for handle in self.handles for name in handle.keys()}

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.where[name].get_tensor(name)


def _read(source, name: str) -> torch.Tensor:
    if name not in source:
        raise KeyError(
            f"Hugging Face weight '{name}' is missing from the checkpoint; is it the model the config describes?"
        )
    return source[name]


def unwrap(model):
    """The GPTModel inside megatron's wrappers (DDP, Float16Module: ``.module``)."""
    while hasattr(model, "module"):
        model = model.module
    return model


def model_chunks(model) -> list:
    """The GPTModels of ``model``: one (wrapped or not), or a sequence of model chunks (one per
    virtual pipeline stage, `slime_megatron.chunks.ModelChunks`)."""
    model = unwrap(model)
    return [unwrap(chunk) for chunk in model] if isinstance(model, (list, torch.nn.ModuleList)) else [model]


# ------------------------------------------------------------------ exporting gathered weights


def export_hf_weights(model, hf_config, with_mtp: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, full CPU tensor)`` for every weight on this pipeline stage,
    gathered over tensor-, expert-tensor- and expert-parallel ranks, in the model's dtype;
    the multi-token prediction layers' too unless ``with_mtp`` is False.

    A collective: every rank of the stage's model-parallel group must iterate it to the
    end, in step; every one of them gets every tensor (data-parallel replicas need not
    call it). With pipeline parallelism each stage yields its own layers (its model chunks' in turn).
    """
    for chunk in model_chunks(model):
        yield from _export_chunk(chunk, hf_config, with_mtp)


def _export_chunk(model, hf_config, with_mtp: bool) -> Iterator[tuple[str, torch.Tensor]]:
    ranks, heads = Ranks.current(model), Heads.of(hf_config)
    params = {**dict(model.named_buffers()), **dict(model.named_parameters())}  # buffers: a router's expert bias
    for rule in _rules(hf_config, model_mtp_layers(model) if with_mtp else 0):
        name = local_name(rule, hf_config, ranks)
        if name is None or name not in params:
            continue
        for full_rule, full in _gathered(rule, params[name].detach(), hf_config, ranks):
            yield from zip(full_rule.hf, unfuse(full_rule, full, heads))


def _gathered(rule: WeightRule, local: torch.Tensor, hf_config, ranks: Ranks):
    """``(rule, full megatron tensor)``: for an expert, one for each expert-parallel rank
    (the experts with the same local index), else just ``rule``'s own."""
    from megatron.core import parallel_state as ps

    if rule.expert is None:
        return [(rule, _gather_tp(rule, local, ps.get_tensor_model_parallel_group(), ranks.tp_size))]
    full = _gather_tp(rule, local, ps.get_expert_tensor_parallel_group(), ranks.etp_size)
    per_rank = num_routed_experts(hf_config) // ranks.ep_size
    copies = _all_gather(full, ps.get_expert_model_parallel_group(), ranks.ep_size)
    local_index = rule.expert % per_rank
    return [(_with_expert(rule, r * per_rank + local_index), t) for r, t in enumerate(copies)]


def _gather_tp(rule: WeightRule, local: torch.Tensor, group, size: int) -> torch.Tensor:
    if rule.kind == "copy" or size == 1:
        return local.to("cpu", copy=True)  # a copy, not a view of the live parameter
    return unshard(rule, _all_gather(local, group, size))


def _all_gather(tensor: torch.Tensor, group, size: int) -> list[torch.Tensor]:
    import torch.distributed as dist

    if size == 1:
        return [tensor.to("cpu", copy=True)]
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor, group=group)
    return [p.cpu() for p in parts]


def _with_expert(rule: WeightRule, expert: int) -> WeightRule:
    """``rule`` for another expert of the same layer (its names renumbered)."""
    old_hf, new_hf = f"experts.{rule.expert}.", f"experts.{expert}."
    return WeightRule(
        _EXPERT.sub(f"local_experts.{expert}.", rule.megatron),
        tuple(name.replace(old_hf, new_hf) for name in rule.hf),
        rule.kind,
        expert,
    )
