"""The served model's weights: loading, in-place updates (tensor buckets or a checkpoint
directory), and releasing / resuming their memory.

An update is checked in full before anything is copied (every name known, every shape
right; a checkpoint directory must cover every parameter), so a refused update changes
nothing. Names are Hugging Face parameter (or buffer: a DeepSeek-style router's
``e_score_correction_bias``) names; both names of a tied parameter
(``lm_head.weight`` and ``model.embed_tokens.weight``) are accepted. A MoE layer's experts,
which transformers 5 stores fused (``mlp.experts.gate_up_proj`` (E, 2I, H) and
``mlp.experts.down_proj`` (E, H, I)), also take the per-expert names that trainers export and
checkpoints on the hub use (``mlp.experts.3.gate_proj.weight`` (I, H), ``up_proj``,
``down_proj``): each goes into its slice of the fused parameter (`target`).

Releasing writes the weights to a temporary safetensors file and empties the parameters,
so a trainer sharing the machine gets the memory back; resuming reads them back, bit for
bit, and removes the file.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import torch

NamedTensors = list[tuple[str, torch.Tensor]]
RELEASED_FILE = "weights.safetensors"
PER_EXPERT = re.compile(r"^(?P<experts>.+\.experts)\.(?P<index>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")


def load_model(model_path: str):
    """The causal LM or vision-language model (float32, eval mode) and tokenizer saved in a
    Hugging Face directory; an
    error for a model whose layers' cache the running batch cannot hold (`layer_cache`)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from slime_sglang.cpu_engine.layer_cache import unsupported_layers
    from slime_sglang.cpu_engine.vision import is_vision_language

    vision = is_vision_language(AutoConfig.from_pretrained(model_path))
    auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = auto.from_pretrained(model_path, dtype=torch.float32).eval()
    layer_types = set(getattr(model.config.get_text_config(), "layer_types", None) or [])
    if "sliding_attention" in layer_types:
        raise ValueError(
            f"{model_path} uses sliding-window attention, which the CPU engine does not support; "
            "serve it with SGLang, or turn sliding windows off in its config.json"
        )
    unsupported = unsupported_layers(model.config)
    if unsupported:
        raise ValueError(
            f"{model_path} ({model.config.model_type}) needs transformers cache layers {', '.join(unsupported)}, "
            "which the CPU engine's running batch does not hold (it holds attention, DSA and linear-attention "
            "layers); serve it with SGLang"
        )
    return model, AutoTokenizer.from_pretrained(model_path)


def target(parameters: dict[str, torch.Tensor], name: str) -> tuple[torch.Tensor, str] | None:
    """The tensor an update of ``name`` writes into, and the parameter it belongs to: the
    parameter itself, or for a per-expert name its expert's slice of the fused experts
    (gate_proj: the first half of ``gate_up_proj[e]``, up_proj: the second). None if unknown."""
    if name in parameters:
        return parameters[name], name
    match = PER_EXPERT.match(name)
    fused_name = match and f"{match['experts']}.{'down_proj' if match['proj'] == 'down_proj' else 'gate_up_proj'}"
    fused = parameters.get(fused_name) if match else None
    if fused is None or fused.dim() != 3 or int(match["index"]) >= fused.shape[0]:
        return None
    expert = fused[int(match["index"])]
    if match["proj"] == "down_proj":
        return expert, fused_name
    half = expert.shape[0] // 2
    return (expert[:half] if match["proj"] == "gate_proj" else expert[half:]), fused_name


def updatable(model) -> dict[str, torch.Tensor]:
    """What an update may write, by name: the parameters, and the buffers (a DeepSeek-style
    router's ``e_score_correction_bias``, which checkpoints hold and SGLang loads as a parameter)."""
    return {**dict(model.named_buffers()), **dict(model.named_parameters(remove_duplicate=False))}


def check_update(model, named: NamedTensors, complete: bool = False) -> str | None:
    """What is wrong with updating ``model`` from ``named`` (None when nothing is).

    With ``complete`` (a whole checkpoint) every parameter must be given, in full.
    """
    parameters = updatable(model)
    targets = [(name, t, target(parameters, name)) for name, t in named]
    unknown = [name for name, _, found in targets if found is None]
    if unknown:
        return (
            f"unknown parameter name(s) {unknown[:3]} ({len(unknown)} in all); the model's names look like "
            f"{next(iter(parameters))!r} (use the names of model.named_parameters() of a Hugging Face model)"
        )
    wrong = [
        f"{name} {tuple(t.shape)} (model: {tuple(view.shape)})"
        for name, t, (view, _) in targets
        if t.shape != view.shape
    ]
    if wrong:
        return f"wrong shape for {', '.join(wrong[:3])}; is the update for another model size?"
    if complete:
        written: dict[int, int] = {}
        for _, t, (_, owner) in targets:
            written[id(parameters[owner])] = written.get(id(parameters[owner]), 0) + t.numel()
        missing = [name for name, p in model.named_parameters() if written.get(id(p), 0) < p.numel()]
        if missing:
            return f"the checkpoint lacks {len(missing)} parameter(s), e.g. {missing[:3]}; is it the same architecture?"
    return None


def apply_update(model, named: NamedTensors) -> None:
    """Copy checked tensors into the model's parameters, or their experts' slices (cast to their dtype)."""
    parameters = updatable(model)
    with torch.no_grad():
        for name, tensor in named:
            target(parameters, name)[0].copy_(tensor)


def read_checkpoint(model_path: str) -> NamedTensors:
    """Every tensor of the safetensors files in a Hugging Face directory; a peft LoRA adapter
    directory's as an adapter update (`slime_sglang.cpu_engine.adapters`)."""
    from safetensors.torch import load_file

    from slime_sglang.cpu_engine.adapters import is_peft_adapter, read_peft_adapter

    if is_peft_adapter(model_path):
        return read_peft_adapter(model_path)

    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors files in {model_path}; save the model with save_pretrained "
            "(safe_serialization) or give the directory that holds them"
        )
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
