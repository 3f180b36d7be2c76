"""The conversions behind ``slime convert``.

hf-to-megatron builds the model on ``tensor × expert`` parallel ranks (processes started
here, joined by gloo on CPU or nccl on GPUs), with every multi-token prediction layer the
checkpoint holds (`slime_megatron.models.mtp`), loads each rank's shards and saves them as a
model-only checkpoint in the backend's format (:mod:`slime_megatron.checkpoint`).
megatron-to-hf reads a checkpoint's full tensors (ours in any layout, or Megatron-LM's:
:mod:`slime_megatron.torch_dist`) and writes them as Hugging Face tensors with the config and
tokenizer of ``--hf-config``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

from slime_megatron.processes import run_on_ranks

#: Files of a Hugging Face directory that are weights (not copied from --hf-config).
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def hf_to_megatron(args) -> int:
    tp, ep = args.tensor_model_parallel_size, args.expert_model_parallel_size
    sizes = _sizes(tp=tp, ep=ep)
    run_on_ranks(_hf_to_megatron_rank, tp * ep, sizes, str(args.hf), str(args.out))
    print(f"wrote {Path(args.out) / 'iter_0000000'} (load it with --load {args.out})")
    return 0


def _hf_to_megatron_rank(rank: int, sizes, hf_dir: str, out: str) -> None:
    from transformers import AutoConfig

    from slime_megatron.checkpoint import save_checkpoint
    from slime_megatron.models import build_model, load_hf_weights
    from slime_megatron.models.mtp import checkpoint_mtp_layers

    hf_config = AutoConfig.from_pretrained(hf_dir)
    model = build_model(hf_config, sizes, mtp_layers=checkpoint_mtp_layers(hf_dir, hf_config))
    load_hf_weights(model, hf_dir, hf_config)
    save_checkpoint(out, 0, model, extra={"converted_from": str(Path(hf_dir).resolve())})


def megatron_to_hf(args) -> int:
    from slime_core.checkpoint.directory import megatron_checkpoint

    path = Path(args.load) if (Path(args.load) / ".metadata").is_file() else megatron_checkpoint(args.load)
    write_hf(path, str(args.hf_config), str(args.out))
    print(f"wrote {args.out}")
    return 0


def write_hf(path, hf_config_dir: str, out: str) -> None:
    """The Hugging Face directory ``out`` of the checkpoint directory ``path`` (ours or
    Megatron-LM's, `slime_megatron.torch_dist`): its weights, with the config and tokenizer
    of ``hf_config_dir``. Runs in this process, in any process (no process group)."""
    from transformers import AutoConfig

    from slime_megatron.export import save_safetensors
    from slime_megatron.torch_dist import read_hf_weights

    weights = read_hf_weights(path, AutoConfig.from_pretrained(hf_config_dir))
    _copy_config_and_tokenizer(Path(hf_config_dir), Path(out))
    save_safetensors(out, weights)


def _copy_config_and_tokenizer(source: Path, out: Path) -> None:
    """Every file of ``source`` except its weights (config, generation config, tokenizer)."""
    out.mkdir(parents=True, exist_ok=True)
    weights = {path for pattern in WEIGHT_FILES for path in source.glob(pattern)}
    for path in source.iterdir():
        if path.is_file() and path not in weights:
            shutil.copy2(path, out / path.name)


def _sizes(tp: int = 1, ep: int = 1) -> SimpleNamespace:
    """The Megatron options the conversion's ranks need (float32, no recomputation)."""
    return SimpleNamespace(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=1,
        context_parallel_size=1,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=None,
        seed=1234,
        bf16=False,
    )
