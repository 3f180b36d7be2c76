"""What a run's parallel layout and its models must agree on, stated once for two callers.

megatron-core (and this backend's weight conversion) enforce these rules only when the train
ranks build the model, after Ray, placement and a checkpoint load; each is a problem here, with
what, why and the fix, so that the plugin's config checks (`slime run --dry-run`, with the other
config errors) and the ranks (a guard: `check_layout`, `check_teacher_vocab`) refuse the same
things with the same words. The model's sizes come from a Hugging Face config: config.json's
keys (the plugin, or the architecture flags of a launch whose checkpoint is elsewhere) or the
transformers config object (the ranks).

No torch, no megatron: the dry run stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a model that the parallel sizes split (None: not known)."""

    layers: int | None  # decoder layers (num_hidden_layers)
    heads: int | None  # attention heads
    query_groups: int | None  # key/value heads (num_key_value_heads; the heads without GQA)
    vocab: int | None  # rows of the embedding
    ffn: int | None  # width of a dense MLP (intermediate_size), None when the model has no dense layer
    experts: int | None  # routed experts of a MoE layer (0: a dense model; None: not known)
    expert_ffn: int | None  # width of one expert's MLP (moe_intermediate_size)

    @classmethod
    def of(cls, hf) -> ModelShape:
        """The shape of a Hugging Face config: config.json's dict or a transformers config."""
        if not isinstance(hf, Mapping):
            hf = (hf.get_text_config() if hasattr(hf, "get_text_config") else hf).to_dict()
        heads = hf.get("num_attention_heads")
        experts = hf.get("num_experts") or hf.get("n_routed_experts") or hf.get("num_local_experts") or 0
        if not experts and "model_type" not in hf:  # a launch's architecture flags may leave them out
            experts = None
        dense_layers = not experts or hf.get("mlp_only_layers") or hf.get("first_k_dense_replace")
        return cls(
            layers=hf.get("num_hidden_layers"),
            heads=heads,
            query_groups=hf.get("num_key_value_heads") or heads,
            vocab=hf.get("vocab_size"),
            ffn=hf.get("intermediate_size") if dense_layers else None,
            experts=experts,
            expert_ffn=hf.get("moe_intermediate_size") if experts else None,
        )


@dataclass(frozen=True)
class Layout:
    """The Megatron parallel sizes of a run (the options of `slime_megatron.plugin`)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1  # --expert-tensor-parallel-size (default: the tensor-parallel size)
    sequence_parallel: bool = False
    first_stage_layers: int | None = None  # --decoder-first-pipeline-num-layers (None: an equal share)
    last_stage_layers: int | None = None  # --decoder-last-pipeline-num-layers
    layers_per_chunk: int | None = None  # --num-layers-per-virtual-pipeline-stage (None: one chunk per stage)

    @classmethod
    def of(cls, config) -> Layout:
        """The sizes of a run's config (or of a tool's namespace of sizes: missing ones are 1)."""
        tp = getattr(config, "tensor_model_parallel_size", 1) or 1
        return cls(
            tp=tp,
            pp=getattr(config, "pipeline_model_parallel_size", 1) or 1,
            cp=getattr(config, "context_parallel_size", 1) or 1,
            ep=getattr(config, "expert_model_parallel_size", 1) or 1,
            etp=getattr(config, "expert_tensor_parallel_size", None) or tp,
            sequence_parallel=bool(getattr(config, "sequence_parallel", False)),
            first_stage_layers=getattr(config, "decoder_first_pipeline_num_layers", None),
            last_stage_layers=getattr(config, "decoder_last_pipeline_num_layers", None),
            layers_per_chunk=getattr(config, "num_layers_per_virtual_pipeline_stage", None),
        )


def layout_problems(shape: ModelShape, layout: Layout, model: str, training: bool = True) -> list[str]:
    """Every rule of ``layout`` that ``shape`` breaks, each naming ``model`` (where the sizes
    come from, e.g. ``--hf-checkpoint DIR``); ``training``: also the rules of training (not of
    building and converting the model)."""
    problems = [
        _divides(layout.tp, "--tensor-model-parallel-size", shape.heads, "attention heads", model, HEADS),
        _divides(layout.tp, "--tensor-model-parallel-size", shape.query_groups, "key/value heads", model, GROUPS),
        _divides(layout.tp, "--tensor-model-parallel-size", shape.vocab, "vocabulary rows (vocab_size)", model, VOCAB),
        _divides(
            layout.tp, "--tensor-model-parallel-size", shape.ffn, "dense MLP width (intermediate_size)", model, MLP
        ),
        _pipeline_stages(shape, layout, model),
        _dense_expert_parallel(shape, layout, model),
        _divides(layout.ep, "--expert-model-parallel-size", shape.experts or None, "routed experts", model, EXPERTS),
        _divides(layout.etp, "--expert-tensor-parallel-size", shape.expert_ffn, "expert MLP width", model, MLP),
    ]
    if training:
        problems.append(_moe_tensor_parallel(shape, layout))
    return [problem for problem in problems if problem]


HEADS = "megatron-core gives each tensor-parallel rank whole attention heads"
GROUPS = "each tensor-parallel rank holds whole key/value heads (the weight conversion splits q, k, v by group)"
VOCAB = "the vocabulary is split evenly over tensor-parallel ranks, unpadded (padded rows would add logits)"
MLP = "megatron-core splits an MLP's width evenly over the tensor-parallel ranks"
STAGES = "megatron-core gives every pipeline stage the same number of layers"
EXPERTS = "megatron-core gives each expert-parallel rank the same number of whole experts"
CHUNKS = "megatron-core cuts each pipeline stage's layers into whole model chunks (virtual stages)"


def _divides(size: int, flag: str, count: int | None, what: str, model: str, why: str) -> str | None:
    if count is None or size <= 1 or count % size == 0:
        return None
    return f"{flag} {size} does not divide the {count} {what} of {model}: {why}; pick a size that divides {count}"


def _pipeline_stages(shape: ModelShape, layout: Layout, model: str) -> str | None:
    """megatron-core's split of the decoder layers over the pipeline stages: the first / last
    stage take --decoder-first/last-pipeline-num-layers when given, every other stage an equal
    share of the rest, at least one layer; with virtual stages, whole chunks of
    --num-layers-per-virtual-pipeline-stage layers (the plugin refuses it with uneven stages,
    and counts below one)."""
    given = {
        flag: count
        for flag, count in (
            ("--decoder-first-pipeline-num-layers", layout.first_stage_layers),
            ("--decoder-last-pipeline-num-layers", layout.last_stage_layers),
        )
        if count is not None
    }
    if shape.layers is None or layout.pp <= 1 or any(count < 1 for count in given.values()):
        return None
    if not given:
        stages = _divides(layout.pp, "--pipeline-model-parallel-size", shape.layers, "decoder layers", model, STAGES)
        per_stage, chunk = shape.layers // layout.pp, layout.layers_per_chunk
        if stages or not chunk or chunk < 1:
            return stages
        what = "decoder layers of each pipeline stage"
        return _divides(chunk, "--num-layers-per-virtual-pipeline-stage", per_stage, what, model, CHUNKS)
    middle, rest = layout.pp - len(given), shape.layers - sum(given.values())
    if rest >= middle and (rest % middle == 0 if middle else rest == 0):
        return None
    flags = " ".join(f"{flag} {count}" for flag, count in given.items())
    return (
        f"--pipeline-model-parallel-size {layout.pp} {flags} leaves {rest} of the {shape.layers} decoder layers of "
        f"{model} for the other {middle} stage(s): {STAGES} (at least one); change the flags so the rest divides evenly"
    )


def _dense_expert_parallel(shape: ModelShape, layout: Layout, model: str) -> str | None:
    if layout.ep <= 1 or shape.experts != 0:
        return None
    return (
        f"--expert-model-parallel-size {layout.ep} splits the experts of a MoE model, and {model} is dense "
        "(no routed experts); drop the flag"
    )


def _moe_tensor_parallel(shape: ModelShape, layout: Layout) -> str | None:
    """megatron-core trains MoE layers over tensor-parallel ranks only with sequence parallelism
    (it refuses in the first forward pass, with a message about performance)."""
    if not shape.experts or layout.tp <= 1 or layout.sequence_parallel:
        return None
    return (
        f"--tensor-model-parallel-size {layout.tp} with a MoE model: megatron-core trains MoE layers over "
        "tensor-parallel ranks only with sequence parallelism; add --sequence-parallel"
    )


def check_layout(hf_config, config, model: str, training: bool = True) -> None:
    """The rank's guard: raise what `layout_problems` finds for a transformers ``hf_config``
    under ``config``'s parallel sizes (the config checks report the same before the run starts)."""
    problems = layout_problems(ModelShape.of(hf_config), Layout.of(config), model, training)
    if problems:
        raise ValueError("\n".join(problems))


def teacher_vocab_problem(policy_vocab: int | None, teacher_vocab: int | None, teacher: str) -> str | None:
    """On-policy distillation compares the token log-probs of the policy and of the teacher."""
    if policy_vocab is None or teacher_vocab is None or policy_vocab == teacher_vocab:
        return None
    return (
        f"--opd-teacher-load {teacher} has a vocabulary of {teacher_vocab}, the policy {policy_vocab}: "
        "distillation compares token log-probs, so use a teacher with the policy's tokenizer"
    )


def check_teacher_vocab(policy_vocab: int, teacher_vocab: int, teacher: str) -> None:
    """The rank's guard for `teacher_vocab_problem`."""
    problem = teacher_vocab_problem(policy_vocab, teacher_vocab, teacher)
    if problem:
        raise ValueError(problem)
