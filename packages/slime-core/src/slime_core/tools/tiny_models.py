"""Tiny tokenizers (and, built on them, tiny models) for tests, examples and laptops.

Nothing here downloads anything: the tokenizer is built with the `tokenizers` library from
a fixed character vocabulary, so tests and the CPU example run offline.
"""

from __future__ import annotations

import string
from pathlib import Path

PAD, EOS, USER, ASSISTANT = "<pad>", "<|endoftext|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [PAD, EOS, USER, ASSISTANT]
#: One token per character: printable ASCII and newline, after the four special tokens (100 in all).
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}" + ASSISTANT + "{{ message['content'] }}" + EOS + "\n"
    "{% elif message['role'] == 'user' %}" + USER + "{{ message['content'] }}\n"
    "{% else %}" + USER + "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def build_char_tokenizer(save_dir: str | Path | None = None):
    """A character-level ``PreTrainedTokenizerFast`` with a chat template (vocab size 100).

    With ``save_dir`` it is also saved there, loadable by ``AutoTokenizer.from_pretrained``.
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS)
    tokenizer.chat_template = CHAT_TEMPLATE
    if save_dir is not None:
        tokenizer.save_pretrained(str(save_dir))
    return tokenizer


#: The shape every tiny family shares: 4 query / 2 key-value heads, a 3x MLP, an untied output
#: layer, unless the family's entry says otherwise.
_SHAPE = dict(
    num_attention_heads=4, num_key_value_heads=2, head_dim="h/4", rms_norm_eps=1e-6, tie_word_embeddings=False
)

#: Per family, the transformers ``model_type`` and what makes a tiny config of it exercise the
#: family's own parts (``h``: the hidden size): MoE with shared experts and dense first layers,
#: MLA, partial rotary, QK norm, linear attention mixed with full attention, sparse attention.
TINY_FAMILIES: dict[str, dict] = {
    "qwen3": dict(tie_word_embeddings=True),
    "qwen2": dict(),
    "llama": dict(),
    "qwen3_moe": dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size="h/2", norm_topk_prob=True, mlp_only_layers=[1]
    ),
    "glm4": dict(partial_rotary_factor=0.5),
    "glm4_moe": dict(
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size="h/2",
        n_shared_experts=1,
        first_k_dense_replace=1,
        partial_rotary_factor=0.5,
        use_qk_norm=True,
        n_group=1,
        topk_group=1,
    ),
    "deepseek_v3": dict(
        num_key_value_heads=4,
        head_dim="h/8",
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size="h/2",
        n_shared_experts=1,
        first_k_dense_replace=1,
        q_lora_rank="h/2",
        kv_lora_rank="h/2",
        qk_rope_head_dim="h/8",
        qk_nope_head_dim="h/4",
        v_head_dim="h/4",
        n_group=2,
        topk_group=1,
    ),
    "qwen3_next": dict(
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size="h/2",
        shared_expert_intermediate_size="h/2",
        linear_num_value_heads=4,
        linear_num_key_heads=2,
        linear_key_head_dim="h/4",
        linear_value_head_dim="h/4",
        linear_conv_kernel_dim=4,
        full_attention_interval=2,
    ),
    # GLM-5: MLA with DeepSeek sparse attention (an indexer picks each query's top 8 keys;
    # every second layer reuses the previous layer's pick), MoE with a shared expert. 8 indexer
    # heads: with 2, many keys score exactly 0 (a ReLU of every head), and top-k among ties
    # depends on the tensor's shape, so transformers' own cached decoding would disagree with
    # its full forward.
    "glm_moe_dsa": dict(
        num_key_value_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size="h/2",
        n_shared_experts=1,
        first_k_dense_replace=1,
        q_lora_rank="h/2",
        kv_lora_rank="h/2",
        qk_rope_head_dim="h/8",
        qk_nope_head_dim="h/4",
        v_head_dim="h/4",
        n_group=1,
        topk_group=1,
        index_topk=8,
        index_head_dim="h/4",
        index_n_heads=8,
        index_topk_freq=2,
        index_skip_topk_offset=1,
    ),
}


def tiny_config(family: str, hidden_size: int = 64, num_layers: int = 2, max_positions: int = 128):
    """A transformers config of ``family`` (a key of `TINY_FAMILIES`) for the character
    tokenizer's vocabulary; sizes written ``"h/k"`` in the table are ``hidden_size // k``."""
    from transformers import AutoConfig

    if family not in TINY_FAMILIES:
        raise ValueError(f"unknown model family {family!r}; tiny models exist for: {', '.join(TINY_FAMILIES)}")
    tokenizer = build_char_tokenizer()
    sizes = {**_SHAPE, **TINY_FAMILIES[family]}
    sizes = {key: hidden_size // int(value[2:]) if isinstance(value, str) else value for key, value in sizes.items()}
    return AutoConfig.for_model(
        family,
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=num_layers,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **sizes,
    )


def build_tiny_model(
    save_dir: str | Path,
    family: str = "qwen3",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    max_positions: int = 128,
    router_bias: float = 0.0,
    mtp_layers: int = 0,
    **config_fields,
) -> Path:
    """Save a randomly initialised causal LM of ``family`` with the character tokenizer to
    ``save_dir`` (a Hugging Face directory that ``from_pretrained`` loads offline).

    The defaults give about 0.1 M parameters: enough to exercise every code path of a backend
    and the CPU engine in seconds on a CPU. ``router_bias`` > 0 draws the routers' correction
    biases (``e_score_correction_bias``, zeros in a fresh model) from U(-router_bias, router_bias),
    so code that loses or misplaces them routes differently; ``config_fields`` set more fields
    of the config (``attention_bias=True``). ``mtp_layers`` (`MTP_FAMILIES` only) appends that
    many multi-token prediction layers to the checkpoint (`_add_mtp_layers`).
    """
    import torch
    from transformers import AutoModelForCausalLM

    if mtp_layers and family not in MTP_FAMILIES:
        raise ValueError(f"mtp_layers: {family} checkpoints have no MTP layers; use one of {', '.join(MTP_FAMILIES)}")
    config = tiny_config(family, hidden_size, num_layers, max_positions)
    for key, value in config_fields.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if router_bias:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    buffer.uniform_(-router_bias, router_bias)
    save_dir = Path(save_dir)
    model.save_pretrained(save_dir)
    build_char_tokenizer(save_dir)
    if mtp_layers:
        longer = tiny_config(family, hidden_size, num_layers + mtp_layers, max_positions)
        for key, value in config_fields.items():
            setattr(longer, key, value)
        _add_mtp_layers(save_dir, longer, num_layers, seed, router_bias)
    return save_dir


#: The families whose checkpoints hold multi-token prediction (MTP) layers (GLM-4.5+, DeepSeek-V3).
MTP_FAMILIES = ("glm4_moe", "deepseek_v3")


def _add_mtp_layers(save_dir: Path, longer, num_layers: int, seed: int, router_bias: float) -> None:
    """Append MTP layers to the single-file checkpoint in ``save_dir`` (of ``num_layers`` layers)
    as GLM-4.5 and DeepSeek-V3 checkpoints hold them, and declare them in config.json
    (``num_nextn_predict_layers``): layer ``L + i`` (L = num_layers) of a random model of the
    config ``longer`` (``L + mtp`` layers), plus its random ``enorm``, ``hnorm``, ``eh_proj``
    (H, 2H) and ``shared_head.norm``, and ``shared_head.head``, a copy of ``lm_head``.
    transformers ignores these tensors when it loads the directory."""
    import json
    import tempfile

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    weights = save_dir / "model.safetensors"
    tensors = load_file(str(weights))
    torch.manual_seed(seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        AutoModelForCausalLM.from_config(longer).save_pretrained(tmp)
        extra = {
            name: t
            for name, t in load_file(f"{tmp}/model.safetensors").items()
            if name.startswith("model.layers.") and int(name.split(".")[2]) >= num_layers
        }
    h, std = longer.hidden_size, longer.initializer_range
    for layer in range(num_layers, longer.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            extra[f"{prefix}{norm}.weight"] = 1.0 + 0.1 * torch.randn(h)
        extra[prefix + "eh_proj.weight"] = std * torch.randn(h, 2 * h)
        extra[prefix + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
        if router_bias:
            extra[prefix + "mlp.gate.e_score_correction_bias"].uniform_(-router_bias, router_bias)
    save_file({**tensors, **extra}, str(weights), metadata={"format": "pt"})
    config_file = save_dir / "config.json"
    config = json.loads(config_file.read_text())
    config["num_nextn_predict_layers"] = longer.num_hidden_layers - num_layers
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_tiny_qwen3(
    save_dir: str | Path, hidden_size: int = 64, num_layers: int = 2, seed: int = 0, max_positions: int = 128
) -> Path:
    """`build_tiny_model` of the ``qwen3`` family (4 query / 2 key-value heads, tied embeddings)."""
    return build_tiny_model(save_dir, "qwen3", hidden_size, num_layers, seed, max_positions)


def perturbed_copy(model_dir: str | Path, save_dir: str | Path, scale: float = 0.05, seed: int = 7) -> Path:
    """A copy of the Hugging Face model in ``model_dir`` (its tokenizer too) with every weight
    moved by ``scale`` × N(0, 1): a model that differs from it everywhere, such as a reference
    model that must not be mistaken for the policy in a test."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    model.save_pretrained(save_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(model_dir) / name, Path(save_dir) / name)
    return Path(save_dir)
