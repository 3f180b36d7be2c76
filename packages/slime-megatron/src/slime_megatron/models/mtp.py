"""Multi-token prediction (MTP) layers: which ones a Hugging Face checkpoint holds, and how
their weights map onto megatron-core's ``MultiTokenPredictionBlock``.

GLM-4.5+ (``glm4_moe``) and DeepSeek-V3 checkpoints append ``num_nextn_predict_layers`` MTP
layers to the decoder's ``L = num_hidden_layers``, as ``model.layers.{L + i}.*``:

- ``enorm`` / ``hnorm``: RMSNorms of the next token's embedding and of the hidden state the
  previous depth (the decoder, for i = 0) gives;
- ``eh_proj``: (H, 2H), the projection of their concatenation (embedding first) back to H;
- a whole decoder layer under its usual names (attention, MoE, norms) at index ``L + i``;
- ``shared_head.norm``: the norm before the output head; ``shared_head.head``: a copy of the
  output layer (DeepSeek-V3 also stores a copy of the embeddings as ``embed_tokens``).

transformers builds none of them (it ignores these tensors on load); SGLang uses them as the
draft model of speculative decoding. megatron-core's MTP layer ``mtp.layers.{i}`` has
``enorm``, ``hnorm``, ``eh_proj`` (column-parallel), ``transformer_layer`` and
``final_layernorm``, and uses the model's own embedding and output layer: the copies are not
loaded, and exports write ``shared_head.head`` from the output layer, so that a written
checkpoint has every tensor the original had (except DeepSeek-V3's ``embed_tokens`` copy).
"""

from __future__ import annotations

import json
from pathlib import Path

from slime_megatron.models.family import model_family
from slime_megatron.models.weight_map import WeightRule


def declared_mtp_layers(hf_config) -> int:
    """The MTP layers config.json declares (``num_nextn_predict_layers``; 0 without)."""
    return int(getattr(hf_config, "num_nextn_predict_layers", 0) or 0)


def checkpoint_mtp_layers(hf_dir, hf_config) -> int:
    """How many of the declared MTP layers the checkpoint in ``hf_dir`` has weights for (a
    config may declare one whose weights were dropped, as transformers' ``save_pretrained`` does)."""
    names = tensor_names(hf_dir)
    first = hf_config.num_hidden_layers
    count = 0
    while count < declared_mtp_layers(hf_config) and f"model.layers.{first + count}.eh_proj.weight" in names:
        count += 1
    return count


def tensor_names(hf_dir) -> set[str]:
    """The tensor names of a Hugging Face directory: its safetensors index, else the files' headers."""
    from safetensors import safe_open

    index = Path(hf_dir) / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    names: set[str] = set()
    for path in sorted(Path(hf_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            names.update(handle.keys())
    return names


def mtp_problem(hf_config, hf_dir, num_layers: int) -> str | None:
    """Why ``num_layers`` MTP layers cannot be built from the checkpoint ``hf_dir``; None if they can."""
    family = model_family(hf_config)
    if family.mtp_layer is None:
        return (
            f"--mtp-num-layers {num_layers}: the Megatron backend's {family.name} family has no multi-token "
            "prediction layers (glm4_moe and deepseek_v3 have); drop --mtp-num-layers"
        )
    held = checkpoint_mtp_layers(hf_dir, hf_config)
    if num_layers > held:
        fix = (
            f"set --mtp-num-layers {held}"
            if held
            else "drop --mtp-num-layers, or give the checkpoint with its MTP layers"
        )
        return (
            f"--mtp-num-layers {num_layers}: {hf_dir} holds {held} MTP layer(s) (config.json declares "
            f"num_nextn_predict_layers {declared_mtp_layers(hf_config)}, each needs its weights, such as "
            f"model.layers.{hf_config.num_hidden_layers}.eh_proj.weight); {fix}"
        )
    return None


def mtp_rules(hf_config, num_layers: int) -> list[WeightRule]:
    """The weight rules of the first ``num_layers`` MTP layers (megatron names ``mtp.layers.{i}.*``),
    then for each one the rule that exports the output layer as its ``shared_head.head``
    (after the output layer's own rule, so loading takes the output layer from ``lm_head``)."""
    first = hf_config.num_hidden_layers
    rules, heads = [], []
    for i in range(num_layers):
        hf, mg = f"model.layers.{first + i}.", f"mtp.layers.{i}."
        rules += [
            WeightRule(mg + "enorm.weight", (hf + "enorm.weight",), "copy"),
            WeightRule(mg + "hnorm.weight", (hf + "hnorm.weight",), "copy"),
            WeightRule(mg + "eh_proj.weight", (hf + "eh_proj.weight",), "column"),
            WeightRule(mg + "final_layernorm.weight", (hf + "shared_head.norm.weight",), "copy"),
        ]
        layer = f"decoder.layers.{first + i}."
        rules += [
            WeightRule(mg + "transformer_layer." + r.megatron.removeprefix(layer), r.hf, r.kind, r.expert)
            for r in model_family(hf_config).mtp_layer(hf_config, first + i)
        ]
        output = "embedding.word_embeddings.weight" if hf_config.tie_word_embeddings else "output_layer.weight"
        heads.append(WeightRule(output, (hf + "shared_head.head.weight",), "column"))
    return rules + heads
