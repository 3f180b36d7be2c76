"""The served model's weights: loading, in-place updates (tensor buckets or a checkpoint
directory), and releasing / resuming their memory.

An update is checked in full before anything is copied (every name known, every shape
right; a checkpoint directory must cover every parameter), so a refused update changes
nothing. Names are Hugging Face parameter names; both names of a tied parameter
(``lm_head.weight`` and ``model.embed_tokens.weight``) are accepted.

Releasing writes the weights to a temporary safetensors file and empties the parameters,
so a trainer sharing the machine gets the memory back; resuming reads them back, bit for
bit, and removes the file.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

NamedTensors = list[tuple[str, torch.Tensor]]
RELEASED_FILE = "weights.safetensors"


def load_model(model_path: str):
    """The causal LM (float32, eval mode) and tokenizer saved in a Hugging Face directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    if "sliding_attention" in (getattr(model.config, "layer_types", None) or []):
        raise ValueError(f"{model_path} uses sliding-window attention, which the CPU engine does not support; "
                         "serve it with SGLang, or turn sliding windows off in its config.json")
    return model, AutoTokenizer.from_pretrained(model_path)


def check_update(model, named: NamedTensors, complete: bool = False) -> str | None:
    """What is wrong with updating ``model`` from ``named`` (None when nothing is).

    With ``complete`` (a whole checkpoint) every parameter must be given.
    """
    parameters = dict(model.named_parameters(remove_duplicate=False))
    unknown = [name for name, _ in named if name not in parameters]
    if unknown:
        return (f"unknown parameter name(s) {unknown[:3]} ({len(unknown)} in all); the model's names look like "
                f"{next(iter(parameters))!r} (use the names of model.named_parameters() of a Hugging Face model)")
    wrong = [f"{name} {tuple(t.shape)} (model: {tuple(parameters[name].shape)})"
             for name, t in named if t.shape != parameters[name].shape]
    if wrong:
        return f"wrong shape for {', '.join(wrong[:3])}; is the update for another model size?"
    if complete:
        given = {id(parameters[name]) for name, _ in named}
        missing = [name for name, p in model.named_parameters() if id(p) not in given]
        if missing:
            return f"the checkpoint lacks {len(missing)} parameter(s), e.g. {missing[:3]}; is it the same architecture?"
    return None


def apply_update(model, named: NamedTensors) -> None:
    """Copy checked tensors into the model's parameters (cast to their dtype)."""
    parameters = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, tensor in named:
            parameters[name].copy_(tensor)


def read_checkpoint(model_path: str) -> NamedTensors:
    """Every tensor of the safetensors files in a Hugging Face directory."""
    from safetensors.torch import load_file

    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_path}; save the model with save_pretrained "
                                "(safe_serialization) or give the directory that holds them")
    return [pair for path in files for pair in load_file(path).items()]


def release_weights(model) -> Path:
    """Move the parameters to a temporary safetensors file and free them; returns its folder."""
    from safetensors.torch import save_file

    folder = Path(tempfile.mkdtemp(prefix="slime-cpu-engine-weights-"))
    save_file({name: p.detach().contiguous() for name, p in model.named_parameters()}, str(folder / RELEASED_FILE))
    for parameter in model.parameters():
        parameter.data = torch.empty(0, dtype=parameter.dtype)
    return folder


def resume_weights(model, folder: Path) -> None:
    """Put back the parameters :func:`release_weights` saved in ``folder`` and remove it."""
    from safetensors.torch import load_file

    saved = load_file(str(folder / RELEASED_FILE))
    for name, parameter in model.named_parameters():
        parameter.data = saved[name]
    shutil.rmtree(folder, ignore_errors=True)
