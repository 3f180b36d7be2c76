"""How each megatron-core parameter is made from Hugging Face tensors, and split over ranks.

A :class:`WeightRule` names one megatron parameter (global layer and expert indices), the
Hugging Face tensors it is made of, and its *kind*, which says both how those tensors are
fused and how the result is sharded over tensor-parallel ranks:

============= ========================================= ==========================================
kind          fused from Hugging Face                   tensor-parallel shard
============= ========================================= ==========================================
copy          one tensor, unchanged                     none (replicated: norms, router)
column        one tensor, unchanged                     rows (dim 0): embeddings, output layer
row           one tensor, unchanged                     columns (dim 1): o_proj, down_proj
qkv           q, k, v interleaved per query group       rows, whole query groups per rank
gate_up       gate then up, stacked                     rows of gate and of up, then stacked
fused_gate_up one tensor, gate and up already stacked   as gate_up (GLM-4's ``mlp.gate_up_proj``)
============= ========================================= ==========================================

Megatron's fused QKV stacks, for each of the ``g`` query groups, that group's ``h/g`` query
heads, then its key head, then its value head (each ``head_dim`` rows; biases the same).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("copy", "column", "row", "qkv", "gate_up", "fused_gate_up")


@dataclass(frozen=True)
class WeightRule:
    """One megatron parameter and the Hugging Face tensors it is made of."""

    megatron: str  # "decoder.layers.3.self_attention.linear_qkv.weight"
    hf: tuple[str, ...]  # ("model.layers.3.self_attn.q_proj.weight", ...k_proj, ...v_proj)
    kind: str  # one of KINDS
    expert: int | None = None  # global expert index of a MoE expert's weight, else None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"weight rule for {self.megatron}: kind '{self.kind}' is not one of {', '.join(KINDS)}")
        expected = {"qkv": 3, "gate_up": 2}.get(self.kind, 1)
        if len(self.hf) != expected:
            raise ValueError(
                f"weight rule for {self.megatron}: kind '{self.kind}' fuses {expected} Hugging Face "
                f"tensors, got {len(self.hf)}: {self.hf}"
            )


@dataclass(frozen=True)
class Heads:
    """The attention shape the qkv kind needs."""

    num_heads: int
    num_query_groups: int
    head_dim: int

    @classmethod
    def of(cls, hf_config) -> Heads:
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        groups = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
        return cls(hf_config.num_attention_heads, groups, head_dim)


def fuse(rule: WeightRule, tensors: list[torch.Tensor], heads: Heads) -> torch.Tensor:
    """The full megatron tensor of ``rule`` from its Hugging Face tensors."""
    if rule.kind == "qkv":
        q, k, v = (t.reshape(heads.num_query_groups, -1, heads.head_dim, *t.shape[1:]) for t in tensors)
        return torch.cat([q, k, v], dim=1).reshape(-1, *q.shape[3:])
    if rule.kind == "gate_up":
        return torch.cat(tensors, dim=0)
    return tensors[0]


def unfuse(rule: WeightRule, tensor: torch.Tensor, heads: Heads) -> list[torch.Tensor]:
    """The Hugging Face tensors of ``rule`` from its full megatron tensor (inverse of fuse)."""
    if rule.kind == "qkv":
        per_group = heads.num_heads // heads.num_query_groups
        grouped = tensor.reshape(heads.num_query_groups, per_group + 2, heads.head_dim, *tensor.shape[1:])
        q, k, v = grouped.split([per_group, 1, 1], dim=1)
        return [t.reshape(-1, *tensor.shape[1:]).contiguous() for t in (q, k, v)]
    if rule.kind == "gate_up":
        return [t.contiguous() for t in tensor.chunk(2, dim=0)]
    return [tensor]


def shard(rule: WeightRule, tensor: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """Tensor-parallel rank ``rank``'s part of the full megatron tensor (of ``size`` ranks)."""
    if rule.kind == "copy" or size == 1:
        return tensor
    if rule.kind == "row":
        return tensor.chunk(size, dim=1)[rank].contiguous()
    if rule.kind in ("gate_up", "fused_gate_up"):
        return torch.cat([half.chunk(size, dim=0)[rank] for half in tensor.chunk(2, dim=0)])
    return tensor.chunk(size, dim=0)[rank].contiguous()  # column, qkv (whole query groups)


def unshard(rule: WeightRule, shards: list[torch.Tensor]) -> torch.Tensor:
    """The full megatron tensor from every tensor-parallel rank's part (inverse of shard)."""
    if rule.kind == "copy" or len(shards) == 1:
        return shards[0]
    if rule.kind == "row":
        return torch.cat(shards, dim=1)
    if rule.kind in ("gate_up", "fused_gate_up"):
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves])])
    return torch.cat(shards, dim=0)
