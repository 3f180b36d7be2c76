"""slime-megatron's config checks (``slime_validate_config``, run by ``slime run`` and its
``--dry-run`` before anything starts): the parallel sizes against the ranks and the model
(`slime_megatron.layout`, whose rules the ranks call too), the family and its mapping, MTP,
pipeline and virtual stages, context parallelism, the user's functions; and the option keys
they read. Light at import: what needs torch or transformers is imported where it is used.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from slime_megatron.hooks import HOOK_OPTIONS

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: The parallel sizes, each of which must divide the number of training ranks.
PARALLEL_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)


#: The user functions the train ranks call (`slime_megatron.hooks`, `slime_megatron.models.provider`).
FUNCTION_KEYS = (*HOOK_OPTIONS, "megatron_model_provider")

#: Uneven pipeline stages: layers on the first / last stage (Megatron-LM's flags).
PIPELINE_KEYS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
#: Virtual pipeline stages (megatron's interleaved schedule), Megatron-LM's flag.
VIRTUAL_KEY = "num_layers_per_virtual_pipeline_stage"

#: The multi-token prediction options (`slime_megatron.models.mtp`), slime's flags.
MTP_KEYS = ("mtp_num_layers", "enable_mtp_training", "mtp_loss_scaling_factor")

#: Every option this plugin declares (a run that sets one without --train-backend uses Megatron).
OPTION_KEYS = (
    PARALLEL_SIZES
    + (
        "expert_tensor_parallel_size",
        "sequence_parallel",
        "recompute_granularity",
        "recompute_method",
        "recompute_num_layers",
        "use_distributed_optimizer",
        "megatron_config",
    )
    + PIPELINE_KEYS
    + (VIRTUAL_KEY,)
    + FUNCTION_KEYS
    + MTP_KEYS
)


def validate(config: Config) -> list[str]:
    """Every problem of ``config`` this backend knows (with another train backend: its options set)."""
    if config.get("train_backend") != "megatron":
        return _check_other_backend(config)
    errors = (
        _check_parallel_sizes(config)
        + _check_layer_options(config)
        + _check_weights_written_hook(config)
        + _check_model_family(config)
        + _check_mtp(config)
        + _check_layout(config)
        + _check_pipeline_stages(config)
        + _check_virtual_stages(config)
        + _check_context_parallel(config)
        + _check_true_on_policy(config)
        + _check_routing_replay(config)
        + _check_lora(config)
    )
    errors = errors or _check_architecture(config)  # imports torch: only once the light checks passed
    if config.get("megatron_config"):
        from slime_megatron.models.transformer_config import MegatronConfigError, parse_megatron_config

        try:
            parse_megatron_config(config.megatron_config)
        except MegatronConfigError as exc:
            errors += exc.errors
    return errors


def _check_routing_replay(config: Config) -> list[str]:
    """MoE routing replay (`slime_megatron.routing_replay`) gives megatron-core's routers each
    micro-batch's top-k before its forward: refused where a router would run again without them
    (activation recomputation of the MoE layers in the backward), where the routers are not the
    backend's (a model provider's)."""
    if not config.get("use_routing_replay"):
        return []
    flag = "--use-rollout-routing-replay" if config.get("use_rollout_routing_replay") else "--use-routing-replay"
    overrides = dict(pair.partition("=")[::2] for pair in config.get("megatron_config") or [])
    recomputed = "moe" in re.findall(r"\w+", overrides.get("recompute_modules", ""))
    errors = []
    if config.get("recompute_granularity") == "full" or recomputed:
        errors.append(
            f"{flag} with activation recomputation of the MoE layers: the backward runs the routers again, which "
            "the backend does not replay; drop --recompute-granularity full (or 'moe' from recompute_modules), or "
            f"drop {flag}"
        )
    if config.get("megatron_model_provider"):
        errors.append(
            f"{flag} with --megatron-model-provider: replay drives the routers of the backend's own model only; "
            "drop one of them"
        )
    if "moe_enable_routing_replay" in overrides:
        errors.append(f"--megatron-config moe_enable_routing_replay is set by {flag}; drop it from --megatron-config")
    return errors


def _check_lora(config: Config) -> list[str]:
    """LoRA: megatron-core has no adapter layers (its LoRA lives in Megatron-Bridge's and NeMo's
    PEFT, which this backend does not use), so ``--lora-rank`` is refused, not ignored."""
    if not config.get("lora_rank"):
        return []
    return [
        "--lora-rank: the Megatron backend has no LoRA (megatron-core has no adapter layers; Megatron-Bridge's "
        "PEFT is not used here); train LoRA with --train-backend fsdp, or drop --lora-rank to train every weight"
    ]


def _check_parallel_sizes(config: Config) -> list[str]:
    """Every parallel size is positive and divides the training ranks; so does their product."""
    ranks = config.actor_num_nodes * config.actor_num_gpus_per_node
    where = (
        f"{ranks} training ranks (--actor-num-nodes {config.actor_num_nodes} × "
        f"--actor-num-gpus-per-node {config.actor_num_gpus_per_node})"
    )
    errors = []
    for key in PARALLEL_SIZES + ("expert_tensor_parallel_size",):
        size = config.get(key)
        if size is not None and (size < 1 or ranks % size):
            flag = "--" + key.replace("_", "-")
            errors.append(
                f"{flag} {size} does not divide the {where}; pick a size that divides {ranks}, or change the rank count"
            )
    tp, pp, cp = (config.get(key) for key in PARALLEL_SIZES[:3])
    if not errors and ranks % (tp * pp * cp):
        errors.append(
            f"tensor × pipeline × context parallel sizes = {tp} × {pp} × {cp} = {tp * pp * cp} does not divide the "
            f"{where}; "
            "the data-parallel size is what is left, so lower one of them"
        )
    etp = config.get("expert_tensor_parallel_size") or tp
    ep = config.expert_model_parallel_size
    if not errors and ranks % (etp * ep * pp):
        errors.append(
            f"expert × expert-tensor × pipeline parallel sizes = {ep} × {etp} × {pp} does not divide the {where}; "
            "lower one of them"
        )
    return errors


def _model_parallel_flags(config: Config) -> list[str]:
    """The Megatron model-parallel sizes above 1, as ``--flag N``."""
    return [
        f"--{key.replace('_', '-')} {config.get(key)}"
        for key in PARALLEL_SIZES + ("expert_tensor_parallel_size",)
        if (config.get(key) or 1) > 1
    ]


def pick_megatron_when_its_options_are_given(config: Config) -> None:
    """A run that sets this backend's options without choosing a backend (a launch script
    written for slime, whose default backend is Megatron) trains with Megatron; an explicit
    ``--train-backend fsdp`` with model-parallel sizes is refused by `_check_other_backend`."""
    given = [key for key in OPTION_KEYS if config.sources.get(key, "default") != "default"]
    if config.sources.get("train_backend", "default") == "default" and given:
        config.train_backend = "megatron"
        config.sources["train_backend"] = f"chosen by --{given[0].replace('_', '-')} (slime's default backend)"


def _check_other_backend(config: Config) -> list[str]:
    """Megatron's model-parallel sizes mean nothing to another backend: refuse them rather than
    train unsplit (slime's launch scripts set them, and slime trains with Megatron); so are the
    functions only Megatron's train ranks call."""
    backend = config.get("train_backend")
    errors = [
        f"{flag} splits {'each sequence' if 'context' in flag else 'the model'} with Megatron, which --train-backend "
        f"{backend} does not do; use --train-backend megatron, or drop the flag"
        for flag in _model_parallel_flags(config)
    ]
    given = [key for key in FUNCTION_KEYS if config.sources.get(key, "default") != "default"]
    mtp = [key for key in MTP_KEYS if config.sources.get(key, "default") != "default"]
    return (
        errors
        + [
            f"--{key.replace('_', '-')} is called by the Megatron backend's train ranks, and --train-backend "
            f"{backend} never calls it; use --train-backend megatron, or drop the flag"
            for key in given
        ]
        + [
            f"--{key.replace('_', '-')}: the Hugging Face models --train-backend {backend} trains have no multi-token "
            "prediction module (transformers drops the checkpoint's MTP layers); use --train-backend megatron, or drop "
            "the flag"
            for key in mtp
        ]
    )


def _check_layer_options(config: Config) -> list[str]:
    errors = []
    if config.get("recompute_granularity") == "full" and not (
        config.get("recompute_method") and config.get("recompute_num_layers")
    ):
        errors.append(
            "--recompute-granularity full needs --recompute-method (uniform or block) and --recompute-num-layers N"
        )
    return errors


def _check_layout(config: Config) -> list[str]:
    """The parallel sizes fit the model (`slime_megatron.layout`, whose rules the ranks also
    check): config.json's sizes, or those of a launch's architecture flags when the checkpoint
    is not on this machine; and the distillation teacher, built on the same layout."""
    from slime_core.config.accepted_flags import model_config, read_model_config
    from slime_megatron.layout import Layout, ModelShape, layout_problems, teacher_vocab_problem

    layout, found = Layout.of(config), model_config(config)
    model, where = found or ({}, "--hf-checkpoint")
    problems = layout_problems(ModelShape.of(model), layout, where)
    teacher_path = config.get("opd_teacher_load")
    teacher = read_model_config(teacher_path) if teacher_path else None
    if teacher is None:
        return problems
    vocab = teacher_vocab_problem(model.get("vocab_size"), teacher.get("vocab_size"), teacher_path)
    teacher_where = f"--opd-teacher-load {teacher_path}"
    return problems + ([vocab] if vocab else []) + layout_problems(ModelShape.of(teacher), layout, teacher_where, False)


#: What else a vision-language family needs of Megatron, by model type.
VLM_NOTES = dict.fromkeys(
    ("qwen3_5", "qwen3_5_moe"),
    "; its text model's gated delta-net (linear attention) layers have no megatron-core layer here either "
    "(THUDM/slime runs Qwen3.5 on its own native Megatron model, slime_plugins.models.qwen3_5_vl, not megatron-core's)",
)


def _check_model_family(config: Config) -> list[str]:
    """The checkpoint's architecture (config.json's model_type) is one Megatron can build, and not
    a vision-language model's: said now, not when every rank fails building the model."""
    import json
    from pathlib import Path

    from slime_megatron.models.family import unsupported_reason

    checkpoint = config.get("hf_checkpoint")
    config_json = Path(checkpoint) / "config.json" if checkpoint else None
    if config_json is None or not config_json.is_file():
        return []
    model = json.loads(config_json.read_text())
    if model.get("vision_config") is not None:
        return [
            f"--hf-checkpoint {checkpoint}: {model.get('model_type')} is a vision-language model (config.json has a "
            "vision_config); the Megatron backend builds text-only models (no vision tower, no image features in "
            f"its inputs){VLM_NOTES.get(model.get('model_type'), '')}; use --train-backend fsdp"
        ]
    reason = unsupported_reason(model.get("model_type"))
    return [f"--hf-checkpoint {checkpoint}: {reason}"] if reason else []


def _check_architecture(config: Config) -> list[str]:
    """What the checkpoint's family refuses to map (`architecture_problem`: linear biases, rope,
    router, activation), which every rank would raise building the model."""
    from pathlib import Path

    checkpoint = config.get("hf_checkpoint")
    if not checkpoint or not (Path(checkpoint) / "config.json").is_file():
        return []
    from transformers import AutoConfig

    from slime_megatron.models.transformer_config import architecture_problem

    reason = architecture_problem(AutoConfig.from_pretrained(checkpoint))
    return [f"--hf-checkpoint {checkpoint}: {reason}"] if reason else []


def _check_mtp(config: Config) -> list[str]:
    """--mtp-num-layers asks for MTP layers the checkpoint holds, of a family that has them,
    built by this backend on one pipeline stage (why: the error below); --enable-mtp-training
    trains some."""
    layers, checkpoint = config.get("mtp_num_layers"), config.get("hf_checkpoint")
    if config.get("enable_mtp_training") and not layers:
        return [
            "--enable-mtp-training trains the multi-token prediction layers of --mtp-num-layers N, which is not "
            "set; add --mtp-num-layers 1 (GLM-4.5+, DeepSeek-V3), or drop --enable-mtp-training"
        ]
    if not layers:
        return []
    if layers < 0:
        return [f"--mtp-num-layers {layers}: give a positive number of MTP layers, or drop the flag"]
    if config.get("megatron_model_provider"):
        return [
            "--mtp-num-layers with --megatron-model-provider: the backend builds the MTP layers into its own "
            "model only; drop one of them"
        ]
    if config.get("pipeline_model_parallel_size", 1) > 1:
        return [
            f"--mtp-num-layers with --pipeline-model-parallel-size {config.pipeline_model_parallel_size}: the "
            "Megatron backend builds MTP layers without pipeline parallelism only (megatron-core puts them on the last "
            "stage with a second copy of the embedding, filled from the first stage "
            "only when the model is built; the backend loads, exports and saves the embedding on the first stage "
            "only, so that copy would keep random weights); use --pipeline-model-parallel-size 1, or drop "
            "--mtp-num-layers"
        ]
    from pathlib import Path

    if not checkpoint or not (Path(checkpoint) / "config.json").is_file() or _check_model_family(config):
        return []
    from transformers import AutoConfig

    from slime_megatron.models.mtp import mtp_problem

    problem = mtp_problem(AutoConfig.from_pretrained(checkpoint), checkpoint, layers)
    return [f"--hf-checkpoint {checkpoint}: {problem}"] if problem else []


def _check_pipeline_stages(config: Config) -> list[str]:
    """--decoder-first/last-pipeline-num-layers set a stage's layers: with pipeline stages, at
    least one layer. How the checkpoint's layers split over the stages is a rule of the layout
    (`slime_megatron.layout`, which the ranks check too)."""
    pp = config.get("pipeline_model_parallel_size") or 1
    given = {key: config.get(key) for key in PIPELINE_KEYS if config.get(key) is not None}
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in given.items())
    if given and pp < 2:
        return [
            f"{flags}: sets the layers of a pipeline stage, and there is one stage; add "
            "--pipeline-model-parallel-size 2 (or more), or drop the flag"
        ]
    if any(value < 1 for value in given.values()):
        return [f"{flags}: every pipeline stage needs at least one layer; give a positive number"]
    return []


def _check_virtual_stages(config: Config) -> list[str]:
    """--num-layers-per-virtual-pipeline-stage N: with pipeline stages of equal layers (that N
    divides: a rule of the layout, `slime_megatron.layout`), on the backend's own model (a
    provider is called without ``vp_stage``) and without MTP layers (no pipeline parallelism
    for them). The interleaved schedule's rule on micro-batches (a multiple of the pipeline
    size, at least one per stage) the rank meets itself, with empty micro-batches
    (`slime_megatron.schedule`)."""
    per_chunk, pp = config.get(VIRTUAL_KEY), config.get("pipeline_model_parallel_size") or 1
    if per_chunk is None:
        return []
    flag = f"--num-layers-per-virtual-pipeline-stage {per_chunk}"
    if pp < 2:
        return [
            f"{flag}: splits pipeline stages into model chunks, and there is one stage; add "
            "--pipeline-model-parallel-size 2 (or more), or drop the flag"
        ]
    uneven = [key for key in PIPELINE_KEYS if config.get(key) is not None]
    others = uneven + [key for key in ("megatron_model_provider", "mtp_num_layers") if config.get(key)]
    if others:
        return [
            f"{flag} with --{others[0].replace('_', '-')}: virtual pipeline stages are built here for stages "
            "of equal layers, by the backend's own model, without MTP layers; drop one of them"
        ]
    if per_chunk < 1:
        return [f"{flag}: give a positive number of layers per model chunk, or drop the flag"]
    return []


def virtual_pipeline_size(config, num_layers: int) -> int | None:
    """Model chunks per pipeline rank with --num-layers-per-virtual-pipeline-stage N: a stage's
    ``num_layers`` / (pipeline size × N); None without the flag (one chunk, no interleaving)."""
    per_chunk = getattr(config, VIRTUAL_KEY, None)
    return num_layers // config.pipeline_model_parallel_size // per_chunk if per_chunk else None


def num_hidden_layers(config: Config) -> int | None:
    """The decoder layers of --hf-checkpoint's config.json; None when it cannot be read."""
    return _hf_config_value(config, "num_hidden_layers")


#: TransformerConfig fields (``--megatron-config``) whose attention cannot be split over
#: context-parallel ranks here: megatron's local attention computes them, and it refuses CP.
NOT_CONTEXT_PARALLEL_FIELDS = ("window_size", "attention_dropout", "apply_query_key_layer_scaling", "softmax_type")


def _check_context_parallel(config: Config) -> list[str]:
    """With --context-parallel-size > 1 every layer's attention must be the one that splits
    sequences (`slime_megatron.models.core_attention`): refuse what would make a rank fall back
    to megatron's local attention, which asserts CP 1, or run MTP layers on split rows."""
    cp = config.get("context_parallel_size") or 1
    if cp == 1:
        return []
    flag = f"--context-parallel-size {cp}"
    errors = []
    if config.get("mtp_num_layers"):
        errors.append(
            f"{flag} with --mtp-num-layers: MTP layers are built without context parallelism only (yet); "
            "use --context-parallel-size 1, or drop --mtp-num-layers"
        )
    if config.get("megatron_model_provider"):
        errors.append(
            f"{flag} with --megatron-model-provider: only the models the backend builds split attention "
            "over context-parallel ranks; use --context-parallel-size 1, or drop the provider"
        )
    overrides = [pair.partition("=") for pair in config.get("megatron_config") or []]
    for key, _, value in overrides:
        if key in NOT_CONTEXT_PARALLEL_FIELDS and value.strip().lower() not in (
            "",
            "0",
            "0.0",
            "null",
            "false",
            "none",
        ):
            errors.append(
                f"{flag} with --megatron-config {key}={value}: that attention runs only without context "
                f"parallelism here; use --context-parallel-size 1, or drop {key}"
            )
    dropout = _hf_config_value(config, "attention_dropout")
    if dropout:
        errors.append(
            f"{flag}: --hf-checkpoint {config.hf_checkpoint} has attention_dropout {dropout}, which runs "
            "only without context parallelism here; use --context-parallel-size 1, or set it to 0 in its config.json"
        )
    return errors


def _hf_config_value(config: Config, key: str):
    """``key`` of the checkpoint's config.json, or None (no checkpoint or no such key)."""
    import json
    from pathlib import Path

    checkpoint = config.get("hf_checkpoint")
    config_json = Path(checkpoint) / "config.json" if checkpoint else None
    if config_json is None or not config_json.is_file():
        return None
    return json.loads(config_json.read_text()).get(key)


def _check_true_on_policy(config: Config) -> list[str]:
    """Megatron's kernels (fused attention, tensor-parallel matmuls) are not the engines' per-sequence ones."""
    if not config.get("true_on_policy_mode"):
        return []
    return [
        "--true-on-policy-mode needs a trainer that computes each sample's log-probs as the engine does (the FSDP "
        "backend); Megatron's fused, tensor-parallel kernels cannot: use --train-backend fsdp, or drop the mode"
    ]


def _check_weights_written_hook(config: Config) -> list[str]:
    """Only disk weight updates write files: with another transport the hook would never run."""
    if config.sources.get("megatron_weights_written_hook", "default") == "default":
        return []
    if config.update_weight_mode == "delta":
        return [
            "--megatron-weights-written-hook runs after the backend writes a full Hugging Face directory, which "
            "--update-weight-mode delta never does (the driver writes its versions); drop one of the two"
        ]
    if config.update_weight_transport == "disk":
        return []
    return [
        f"--megatron-weights-written-hook runs after a disk weight update, and this run's weights reach the engines "
        f"by {config.update_weight_transport or 'the default transport (tensor or broadcast)'}; "
        "add --update-weight-transport disk, or drop the hook"
    ]
