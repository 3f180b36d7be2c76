"""Tiny tokenizers (and, built on them, tiny models) for tests, examples and laptops.

Nothing here downloads anything: the tokenizer is built with the `tokenizers` library from
a fixed character vocabulary, so tests and the CPU example run offline.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TinyShape:
    """A tiny model's shape: a transformers ``model_type``, the released checkpoint whose
    config.json it follows, and the config fields that keep every structural option of that
    config (biases, tied or untied embeddings, norms, rotary scaling and fraction, attention
    kind, MoE routing, dense and sparse layers), scaled down in sizes only (hidden size, heads,
    head and low-rank dims, experts, layers, vocabulary). Shared fields: `_SHAPE`. Sizes written
    as strings are fractions of the hidden size ``h``: ``"h/4"`` is ``h // 4``, ``"3h/8"``
    is ``3 * h // 8``."""

    model_type: str
    released: str  # the Hugging Face repository whose config.json the shape follows
    fields: dict
    #: the multi-token prediction layers the released checkpoint holds (num_nextn_predict_layers):
    #: `slime tiny-model` writes them; `build_tiny_model` only when asked (``mtp_layers``)
    mtp_layers: int = 0


#: The shape every tiny family shares: 4 query / 2 key-value heads, a 3x MLP, an untied output
#: layer, unless the family's entry says otherwise.
_SHAPE = dict(
    num_attention_heads=4, num_key_value_heads=2, head_dim="h/4", rms_norm_eps=1e-6, tie_word_embeddings=False
)

#: YaRN as DeepSeek-V3's config.json sets it (a 40x longer context than the 4,096 positions it
#: was pretrained on; mscale_all_dim also scales the attention's softmax).
_DEEPSEEK_V3_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
#: Llama 3.1's rope scaling, as its config.json sets it.
_LLAMA_3_1_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
#: DeepSeek-V3's MoE: sigmoid scores with a correction bias ("noaux_tc"), the best half of the
#: expert groups (released: 4 of 8 groups of 32; here 1 of 2 groups of 2), the top-k renormalised
#: and scaled by 2.5, a shared expert, dense first layers (released: 3 of 61; here 1).
_DEEPSEEK_MOE = dict(
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size="h/2",
    n_shared_experts=1,
    first_k_dense_replace=1,
    n_group=2,
    topk_group=1,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
)

#: Per family (transformers ``model_type``), the released checkpoint its tiny model follows. Each
#: keeps what that checkpoint's config.json sets: explicit head dims wider than hidden / heads
#: (``head_dim="h/2"`` with 4 heads: 2h, as Qwen3-30B-A3B's 32 x 128 = 2 x 2048), q/k/v biases,
#: QK norms, partial and scaled rotary embeddings, multi-latent attention with a low-rank query,
#: MoE routing, shared experts, dense first layers, linear attention mixed with full attention,
#: sparse attention.
TINY_FAMILIES: dict[str, TinyShape] = {
    # Qwen3-0.6B to 4B: tied embeddings. (Their 16 x 128 heads are wider than the hidden size;
    # the tiny Qwen3, the suite's default model, keeps heads x head_dim = hidden as Qwen3-8B+ do.)
    "qwen3": TinyShape("qwen3", "Qwen/Qwen3-0.6B", dict(tie_word_embeddings=True)),
    # Qwen2.5-7B+: untied; q/k/v biases are always on in model_type qwen2.
    "qwen2": TinyShape("qwen2", "Qwen/Qwen2.5-7B", dict()),
    "llama": TinyShape("llama", "meta-llama/Llama-3.1-8B", dict(rope_parameters=_LLAMA_3_1_ROPE)),
    "qwen3_moe": TinyShape(
        "qwen3_moe",
        "Qwen/Qwen3-30B-A3B",
        dict(
            head_dim="h/2",
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size="h/2",
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
    # GLM-4-9B-0414: q/k/v biases, interleaved half rotary, norms after attention and MLP.
    "glm4": TinyShape("glm4", "zai-org/GLM-4-9B-0414", dict(attention_bias=True, partial_rotary_factor=0.5)),
    "glm4_moe": TinyShape(
        "glm4_moe",
        "zai-org/GLM-4.5",
        dict(
            head_dim="h/2",
            attention_bias=True,
            use_qk_norm=True,
            partial_rotary_factor=0.5,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size="h/2",
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
        ),
        mtp_layers=1,
    ),
    "deepseek_v3": TinyShape(
        "deepseek_v3",
        "deepseek-ai/DeepSeek-V3",
        dict(
            num_key_value_heads=4,
            head_dim="h/8",
            q_lora_rank="h/2",
            kv_lora_rank="h/2",
            qk_rope_head_dim="h/8",
            qk_nope_head_dim="h/4",
            v_head_dim="h/4",
            rope_parameters=_DEEPSEEK_V3_YARN,
            **_DEEPSEEK_MOE,
        ),
        mtp_layers=1,
    ),
    # Qwen3-Next-80B-A3B: gated delta-net linear attention, full (gated) attention every
    # full_attention_interval-th layer (released: 4 of 48 layers; here 2 of 2), a quarter rotary,
    # 16 x 256 heads (2h), MoE with a shared expert.
    "qwen3_next": TinyShape(
        "qwen3_next",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        dict(
            head_dim="h/2",
            partial_rotary_factor=0.25,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size="h/2",
            shared_expert_intermediate_size="h/2",
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim="h/4",
            linear_value_head_dim="h/4",
            linear_conv_kernel_dim=4,
            full_attention_interval=2,
        ),
    ),
    # GLM-5: MLA with value heads wider than the query/key heads (192 + 64 rope, 256), DeepSeek
    # sparse attention (an indexer picks each query's top 8 keys; every second layer reuses the
    # previous layer's pick: index_topk_freq, which GLM-5 serving code reads from a config; kept
    # beyond the released config so that path is tested), MoE with a shared expert. 8 indexer
    # heads: with 2, many keys score exactly 0 (a ReLU of every head), and top-k among ties
    # depends on the tensor's shape, so transformers' own cached decoding would disagree with
    # its full forward.
    "glm_moe_dsa": TinyShape(
        "glm_moe_dsa",
        "zai-org/GLM-5",
        dict(
            num_key_value_heads=4,
            q_lora_rank="h/2",
            kv_lora_rank="h/2",
            qk_rope_head_dim="h/8",
            qk_nope_head_dim="3h/8",
            v_head_dim="h/2",
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size="h/2",
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            index_topk=8,
            index_head_dim="h/4",
            index_n_heads=8,
            index_topk_freq=2,
            index_skip_topk_offset=1,
        ),
    ),
}

#: The other released shapes of a family: the same model_type, another structural option.
TINY_VARIANTS: dict[str, TinyShape] = {
    "qwen2_tied": TinyShape("qwen2", "Qwen/Qwen2.5-0.5B", dict(tie_word_embeddings=True)),  # 0.5B to 3B
    "qwen3_untied": TinyShape("qwen3", "Qwen/Qwen3-8B", dict()),  # 8B and larger
}
#: Every name ``--family`` takes: the families, then their variants.
TINY_SHAPES: dict[str, TinyShape] = {**TINY_FAMILIES, **TINY_VARIANTS}


def tiny_config(family: str, hidden_size: int = 64, num_layers: int = 2, max_positions: int = 128):
    """A transformers config of ``family`` (a key of `TINY_SHAPES`: a family or a variant) for the
    character tokenizer's vocabulary; sizes written as fractions of ``h`` are of ``hidden_size``."""
    from transformers import AutoConfig

    if family not in TINY_SHAPES:
        raise ValueError(f"unknown model family {family!r}; tiny models exist for: {', '.join(TINY_SHAPES)}")
    tokenizer = build_char_tokenizer()
    shape = TINY_SHAPES[family]
    fields = {key: _sized(value, hidden_size) for key, value in {**_SHAPE, **shape.fields}.items()}
    return AutoConfig.for_model(
        shape.model_type,
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=num_layers,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **fields,
    )


def _sized(value, hidden_size: int):
    """``value``, or the size it writes as a fraction of the hidden size (``"3h/8"``: 3 * h // 8)."""
    fraction = re.fullmatch(r"(\d*)h/(\d+)", value) if isinstance(value, str) else None
    if fraction is None:
        return value
    return int(fraction[1] or 1) * hidden_size // int(fraction[2])


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


def tie_moe_routers(model_dir: str | Path, share: float = 0.02) -> Path:
    """Rewrite the MoE model in ``model_dir`` so that each expert's router row is row 0 plus
    ``share`` of its own: the experts' scores nearly tie, so small numeric differences (bf16 against
    float32) change the routing, as routing replay's tests and benchmark need."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            weight = layer.mlp.gate.weight
            weight.copy_(weight[:1] + share * weight)
    model.save_pretrained(model_dir)
    return Path(model_dir)
