"""A Megatron checkpoint as ``--ref-load`` (what slime's launch scripts give): its weights as a
Hugging Face state dict, converted on the fly by the ``megatron`` checkpoint reader
(``slime_register_checkpoint_readers``; slime-megatron registers it and reads ours and
Megatron-LM's torch_dist checkpoints). Without slime-megatron installed the run is refused at
config time (`missing_converter`), never trained on other weights.
"""

from __future__ import annotations

import importlib.util
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from slime_core.config.config import Config


def missing_converter(config: Config) -> str | None:
    """The config error for a Megatron ``--ref-load`` when slime-megatron is not installed."""
    if importlib.util.find_spec("slime_megatron") is not None:
        return None
    return (
        f"--ref-load {config.ref_load} is a Megatron checkpoint, which the FSDP backend reads with slime-megatron's "
        "conversion: pip install slime-megatron (or, where it is installed, convert it once with `slime convert "
        f"megatron-to-hf --load {config.ref_load} --hf-config {config.hf_checkpoint} --out DIR` and give --ref-load "
        "DIR)"
    )


def hf_state_dict(root: str, hf_dir: str, config: Config) -> dict[str, torch.Tensor]:
    """The state dict of ``hf_dir``'s model with the weights of the Megatron checkpoint ``root``
    (as transformers names them in memory: tied and fused weights included)."""
    from slime_core.checkpoint.directory import megatron_checkpoint
    from slime_core.plugins import Plugins
    from slime_fsdp.model import load_model

    read = Plugins.in_worker(config).registry("checkpoint_readers").get("megatron")
    with tempfile.TemporaryDirectory(prefix="slime-ref-load-") as converted:
        read(megatron_checkpoint(root), hf_dir, converted)
        return load_model(converted).state_dict()
