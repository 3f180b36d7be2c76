"""The model weights of a Megatron checkpoint in the torch_dist format, whoever wrote it: this
backend (``--save``, ``slime convert hf-to-megatron``) or Megatron-LM (slime's
``tools/convert_hf_to_torch_dist.py``, whose checkpoints slime's launch scripts give as
``--ref-load``). The directory a checkpoint root points to is found by
``slime_core.checkpoint.directory.megatron_checkpoint`` (``iter_XXXXXXX`` or ``release``).

Both writers store each parameter under megatron-core's sharded key (``GPTModel.sharded_state_dict``,
no wrapper prefix) as one full tensor cut in chunks, so any tensor/expert/pipeline layout reads
it. The keys of one model differ between writers in known ways, which `stored_key` resolves:

- layers: a block of layers of one kind is stacked under one key, the layer first
  (``decoder.layers.mlp.linear_fc1.weight``); otherwise each layer has its own
  (``decoder.layers.0.mlp.linear_fc1.weight``);
- norms: megatron's local grouped-query attention layers (ours) store the input and pre-MLP
  norms under Transformer Engine's fused names (``self_attention.linear_qkv.layer_norm_weight``,
  ``mlp.linear_fc1.layer_norm_weight``); its multi-latent attention layers (DeepSeek-V3) have no
  such map and store them under their own names (``input_layernorm.weight``,
  ``pre_mlp_layernorm.weight``), as Transformer Engine MLA layers do for the input norm; a
  Transformer Engine MoE layer (Megatron-LM's) keeps its pre-MLP norm as a module of its own:
  ``pre_mlp_layernorm.weight``; Transformer Engine MLA layers fuse the norms of the compressed q
  and kv into their up-projections (``linear_q_up_proj.layer_norm_weight``,
  ``linear_kv_up_proj.layer_norm_weight``);
- experts: a layer's experts are stacked, the expert first (``mlp.experts.experts.linear_fc1.weight``).

Only weights are read: not the optimizer state, the extras, nor ``common.pt`` (Megatron-LM
pickles its arguments there, which torch refuses to load safely). The ``.metadata`` is read
with an allow-list (`slime_core.checkpoint.safety`): a ``--ref-load`` runs no code it carries.
"""

from __future__ import annotations

import re
import warnings

import torch

from slime_core.checkpoint.safety import dcp_failures_raised, guarded_dcp_reads

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_MTP_LAYER = re.compile(r"^(mtp\.layers\.\d+\.transformer_layer\.)(.+)$")  # an MTP layer's decoder layer
_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(.+)$")
#: a parameter's name in megatron's modules -> its stored names, in the order they are tried
_STORED_NORMS = {
    "input_layernorm.weight": ("self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"),
    "pre_mlp_layernorm.weight": ("mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"),
    "self_attention.q_layernorm.weight": (
        "self_attention.q_layernorm.weight",
        "self_attention.linear_q_up_proj.layer_norm_weight",
    ),
    "self_attention.kv_layernorm.weight": (
        "self_attention.kv_layernorm.weight",
        "self_attention.linear_kv_up_proj.layer_norm_weight",
    ),
}
#: our sharded key's end -> a Transformer Engine layer's, where the two differ (see the docstring)
_TE_NAMES = (
    ("mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"),
    ("self_attention.q_layernorm.weight", "self_attention.linear_q_up_proj.layer_norm_weight"),
    ("self_attention.kv_layernorm.weight", "self_attention.linear_kv_up_proj.layer_norm_weight"),
)


def stored_keys(path) -> dict:
    """The checkpoint's stored keys, each with its metadata (global size, dtype, chunks)."""
    from torch.distributed.checkpoint import FileSystemReader

    guarded_dcp_reads()
    return FileSystemReader(str(path)).read_metadata().state_dict_metadata


def stored_key(name: str, stored) -> tuple[str, tuple[int, ...]]:
    """Where the full megatron parameter ``name`` (global layer and expert indices, as the
    weight rules name it) is stored: its key in ``stored``, and the index of its tensor in the
    stored one (stacked layers, stacked experts)."""
    layer, mtp = _LAYER.match(name), _MTP_LAYER.match(name)
    if mtp:  # stored as a decoder layer is, under its own prefix (never stacked)
        names, index = _stored_in_layer(mtp.group(2))
        return _first_stored([(mtp.group(1) + n, index) for n in names], name, stored)
    if not layer:
        return _first_stored([(name, ())], name, stored)
    i = int(layer.group(1))
    names, index = _stored_in_layer(layer.group(2))
    candidates = [(f"decoder.layers.{i}.{n}", index) for n in names] + [
        (f"decoder.layers.{n}", (i, *index)) for n in names
    ]
    return _first_stored(candidates, name, stored)


def _stored_in_layer(rest: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A layer's parameter ``rest`` (after the layer's prefix): the names it may be stored
    under in the layer, and its index in the stored tensor (its expert's, when stacked)."""
    expert = _EXPERT.match(rest)
    index = ()
    if expert:
        rest, index = f"mlp.experts.experts.{expert.group(2)}", (int(expert.group(1)),)
    return _STORED_NORMS.get(rest, (rest,)), index


def _first_stored(candidates, name: str, stored) -> tuple[str, tuple[int, ...]]:
    for key, index in candidates:
        if key in stored:
            return key, index
    raise KeyError(
        f"the checkpoint stores no '{name}' (looked for {[key for key, _ in candidates]}); "
        "is it a checkpoint of the model --hf-checkpoint describes?"
    )


def read_hf_weights(path, hf_config) -> dict[str, torch.Tensor]:
    """The Hugging Face tensors (checkpoint names, the stored dtype) of the checkpoint
    directory ``path``, with the multi-token prediction layers it stores, read whole in this process without any
    process group (``slime convert
    megatron-to-hf``, the FSDP backend's ``--ref-load``)."""
    from torch.distributed.checkpoint import FileSystemReader, load

    from slime_megatron.models import megatron_to_hf
    from slime_megatron.models.weights import loading_rules

    guarded_dcp_reads()
    reader = FileSystemReader(str(path))
    stored = reader.read_metadata().state_dict_metadata
    mtp_layers = len({key.split(".")[2] for key in stored if key.startswith("mtp.layers.")})
    where = {rule.megatron: stored_key(rule.megatron, stored) for rule in loading_rules(hf_config, mtp_layers)}
    tensors = {key: torch.empty(stored[key].size, dtype=stored[key].properties.dtype) for key, _ in where.values()}
    with warnings.catch_warnings():  # without a process group torch warns that it reads in one process: it should
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        with dcp_failures_raised(f"reading {path}"):
            load(tensors, storage_reader=reader, no_dist=True)
    return megatron_to_hf({name: tensors[key][index] for name, (key, index) in where.items()}, hf_config, mtp_layers)


def load_weights(path, model) -> None:
    """Fill this rank's shards of ``model`` (a GPTModel, or one wrapped by DDP / Float16Module,
    or model chunks) from the checkpoint directory ``path``, in any parallel layout; a
    collective over the ranks.

    Raises if the checkpoint lacks a weight of ``model`` (another model, or an unknown layout).
    """
    from slime_megatron.models.weights import model_chunks

    for chunk in model_chunks(model):
        _load_chunk(path, chunk)


def _load_chunk(path, model) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.core import CheckpointingException

    stored = stored_keys(path)
    request = {
        name: _renamed(item, stored)
        for name, item in model.sharded_state_dict().items()
        if not name.endswith("_extra_state")
    }
    try:
        with dcp_failures_raised(f"reading {path}"):
            loaded = dist_checkpointing.load(request, str(path), common_strategy=_weights_only())
    except CheckpointingException as exc:
        raise ValueError(
            f"{path}: its weights do not fit the model of --hf-checkpoint ({exc}); give a checkpoint of the same model"
        ) from exc
    unfilled = [
        name for name in model.load_state_dict(loaded, strict=False).missing_keys if not name.endswith("_extra_state")
    ]
    assert not unfilled, unfilled  # every parameter was requested


def _renamed(item, stored):
    """``item`` (a sharded tensor of ours) under the key the checkpoint has: a Transformer
    Engine MoE layer's pre-MLP norm, a Transformer Engine MLA layer's q and kv norms (see the
    module docstring)."""
    key = getattr(item, "key", "")
    for ours, theirs in _TE_NAMES:
        if key.endswith(ours) and key not in stored and key[: -len(ours)] + theirs in stored:
            item.key = key[: -len(ours)] + theirs
    return item


def _weights_only():
    """megatron's common-state loader, minus ``common.pt`` (it holds no weights)."""
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy

    class WeightsOnly(TorchCommonLoadStrategy):
        def load_common(self, checkpoint_dir):
            return {}

    return WeightsOnly()
