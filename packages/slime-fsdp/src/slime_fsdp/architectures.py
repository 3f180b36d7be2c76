"""What some architectures need of the FSDP backend, checked when a run is configured (from the
checkpoint's ``config.json`` alone: no torch, no transformers).

- Linear attention (Qwen3-Next's gated delta-net) cannot be packed: its causal convolution
  and recurrent state run along the whole row, so one sample's state would flow into the next
  (transformers' torch path honours no sequence boundaries). Padded rows, one sample each,
  keep it exact: the state never reaches the padding after a sample's last token.
- DeepSeek sparse attention (GLM-5's ``indexed_attention``) needs an attention implementation
  that takes a mask: its indexer masks its scores with the causal mask and then restricts the
  mask to each query's top-k keys. The varlen kernels (flash-attention, ``slime_packed``) get
  no mask and would attend to every key; sdpa and eager apply it, packed or padded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config.config import Config

LINEAR_ATTENTION, SPARSE_ATTENTION = "linear_attention", "indexed_attention"  # transformers layer types
DENSE_ONLY = ("flash_attention_2", "flash_attention_3", "slime_packed")  # no mask: every key attended


def layer_types(path: str) -> set[str]:
    """The ``layer_types`` of the model config in the directory ``path`` (empty when it names none)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return set()
    config = json.loads(config_file.read_text())
    return set(config.get("layer_types") or config.get("text_config", {}).get("layer_types") or [])


def architecture_problems(config: Config) -> list[str]:
    """What the FSDP backend cannot do with ``--hf-checkpoint``'s architecture under ``config``."""
    path = config.get("hf_checkpoint")
    types = layer_types(path) if path else set()
    problems = []
    if LINEAR_ATTENTION in types and config.get("use_dynamic_batch_size"):
        problems.append(
            f"--use-dynamic-batch-size packs samples into one row, but {path} has linear-attention layers, "
            "whose recurrent state would flow from one sample into the next; drop --use-dynamic-batch-size "
            "(one padded row per sample, --micro-batch-size)"
        )
    attention = config.get("attn_implementation")
    if SPARSE_ATTENTION in types and attention in DENSE_ONLY:
        problems.append(
            f"--attn-implementation {attention} would attend to every key of {path}'s sparse-attention "
            "(DSA) layers instead of the indexer's top-k; use sdpa (the default for it) or eager"
        )
    return problems
