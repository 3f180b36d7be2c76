"""Loading a Hugging Face causal LM from a local directory and sharding it with FSDP2."""

from __future__ import annotations

from pathlib import Path

import torch


def load_model(
    path: str,
    dtype: torch.dtype = torch.float32,
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
    compile_layers: bool = False,
):
    """``AutoModelForCausalLM`` (``AutoModelForImageTextToText`` for a vision-language model)
    from a local directory, on CPU, in ``dtype`` (master weights).

    ``attn_implementation`` None picks `default_attention()`; ``compile_layers``: see
    `compile_decoder_layers`.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from slime_fsdp import attention
    from slime_fsdp.vision import is_vision_language

    check_model_dir(path)
    attention.register()
    auto = AutoModelForImageTextToText if is_vision_language(path) else AutoModelForCausalLM
    model = auto.from_pretrained(
        path, dtype=dtype, local_files_only=True, attn_implementation=attn_implementation or default_attention(path)
    )
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for config in (model.config, model.config.get_text_config()):  # a VLM's text model reads its own
        config.use_cache = False  # no key-value / linear-attention caches built in training forwards
    freeze_indexers(model)
    if compile_layers:
        compile_decoder_layers(model)
    return model


def compile_decoder_layers(model) -> None:
    """``--fsdp-torch-compile``: each decoder layer's ``forward`` through ``torch.compile``.

    Only the forward method is compiled, not the module call: FSDP2's hooks (all-gather before,
    free after) stay outside the graph. The layers share one code object, and torch inlines
    module parameters as graph inputs, so one compiled graph serves every layer; shapes are
    dynamic (packed rows change length every micro-batch)."""
    for layer in decoder_layers(model):
        layer.forward = torch.compile(layer.forward, dynamic=True)


def enable_batch_invariant_kernels() -> None:
    """``--true-on-policy-mode`` on GPUs: SGLang's batch-invariant kernels (matmul, log-softmax,
    mean) in place of torch's, the ones SGLang's ``--enable-deterministic-inference`` serves with,
    so a sample's numbers do not depend on its micro-batch's shape. Needs the ``sglang`` package
    on the train ranks (``slime-sglang[server]``)."""
    try:
        from sglang.srt.batch_invariant_ops import enable_batch_invariant_mode
    except ImportError as exc:
        raise RuntimeError(
            "--true-on-policy-mode on GPUs needs SGLang's batch-invariant kernels on the train ranks "
            f"({exc}); pip install 'slime-sglang[server]' where the ranks run, or drop the mode"
        ) from exc
    enable_batch_invariant_mode()


def freeze_indexers(model) -> None:
    """Freeze the indexers of DeepSeek sparse attention (GLM-5).

    An indexer chooses each query's keys by top-k, through which no gradient passes: the
    policy loss never trains it (DeepSeek-V3.2 trains it with a loss of its own, which slime
    does not have). Frozen, it is still saved, loaded and pushed to the engines, but the
    optimizer keeps no state for parameters it never updates, so checkpoints resume."""
    for name, parameter in model.named_parameters():
        if ".indexer." in name:
            parameter.requires_grad_(False)


def default_attention(path: str | None = None) -> str:
    """flash_attention_2 on a GPU that has flash_attn installed; elsewhere slime's own
    ``slime_packed`` (varlen flash through torch on CUDA, per-sample sdpa on CPU): both keep
    packed samples apart without a (T, T) mask. For a model with DeepSeek sparse attention
    (the checkpoint in ``path``), sdpa: see `slime_fsdp.architectures`; for a vision-language
    model too (its three-row positions do not mark where packed samples start)."""
    import importlib.util

    from slime_fsdp.architectures import SPARSE_ATTENTION, layer_types
    from slime_fsdp.attention import NAME
    from slime_fsdp.vision import is_vision_language

    if path is not None and (SPARSE_ATTENTION in layer_types(path) or is_vision_language(path)):
        return "sdpa"
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return NAME


def check_model_dir(path: str) -> None:
    """A clear error for a checkpoint directory that is not there or holds no model."""
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"--hf-checkpoint {path}: the directory does not exist; give a local Hugging Face model "
            "directory (config.json, weights, tokenizer), e.g. one made by `huggingface-cli download`"
        )
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"--hf-checkpoint {path}: no config.json there; is this a Hugging Face model directory?"
        )


def load_tokenizer(path: str, model):
    """The tokenizer saved with the model; an error if its vocabulary does not fit the model."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    vocab = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > vocab:
        raise ValueError(
            f"the tokenizer in {path} has {len(tokenizer)} tokens but the model's embedding has {vocab} rows: "
            "they do not belong together; save the tokenizer the model was trained with into that directory"
        )
    return tokenizer


def decoder_layers(model) -> list[torch.nn.Module]:
    """The modules to shard one by one: those whose class the model marks as not to be split
    (``_no_split_modules``: its decoder layers, for every transformers family)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} names no decoder layer class (_no_split_modules); cannot shard it per layer"
        )
    return layers


def shard(model, mesh, bf16: bool = False, cpu_offload: bool = False):
    """FSDP2: ``fully_shard`` each decoder layer, then the root (embeddings, norm, head)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload else OffloadPolicy()
    kwargs = {"mesh": mesh, "offload_policy": offload}
    if bf16:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model
