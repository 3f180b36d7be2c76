"""megatron-core's ``GPTModel`` for a Hugging Face config, on the current parallel state."""

from __future__ import annotations

import torch


def build_model(hf_config, config, mtp_layers: int = 0, vp_stage: int | None = None):
    """This rank's part of the model (its tensor/expert shards and pipeline stage, or with
    virtual pipeline stages its chunk ``vp_stage``), with
    ``mtp_layers`` multi-token prediction layers after the decoder (an
    `slime_megatron.models.mtp_model.MTPGPTModel`; the checkpoint must hold them:
    `slime_megatron.models.mtp.mtp_problem`).

    Uses megatron's local (non-Transformer-Engine) layers (with ``--sequence-parallel``, the
    norms of `slime_megatron.models.norms`) as the family edits them (``Family.layer_spec``),
    with the core attention fused (`slime_megatron.models.core_attention`),
    float32 weights, or bf16 with ``config.bf16``; the weights are randomly initialised: load
    them with :func:`slime_megatron.models.load_hf_weights`. Megatron's parallel groups must exist
    (:func:`slime_megatron.parallel.init_parallel`).
    """
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec

    from slime_megatron.layout import check_layout
    from slime_megatron.models.family import model_family
    from slime_megatron.models.norms import with_sequence_parallel_norms
    from slime_megatron.models.specs import with_fused_core_attention
    from slime_megatron.models.transformer_config import transformer_config

    _without_transformer_engine()
    family = model_family(hf_config)
    tc = transformer_config(hf_config, config, mtp_layers)
    check_layout(hf_config, config, f"the {hf_config.model_type} model", training=False)
    spec = get_gpt_decoder_block_spec(tc, use_transformer_engine=False, normalization="RMSNorm", vp_stage=vp_stage)
    if tc.sequence_parallel:
        spec = with_sequence_parallel_norms(spec)
    spec = with_fused_core_attention(family.layer_spec(spec))
    # each MTP layer's decoder layer is built as the last decoder layer is (a MoE layer here)
    mtp_spec = get_gpt_mtp_block_spec(tc, spec, use_transformer_engine=False) if mtp_layers else None
    if mtp_spec is not None and tc.sequence_parallel:
        mtp_spec = with_sequence_parallel_norms(mtp_spec)
    model = _model_class(mtp_layers)(
        tc,
        spec,
        vocab_size=hf_config.vocab_size,
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
        post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
        vp_stage=vp_stage,
        share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
        position_embedding_type="rope",
        mtp_block_spec=mtp_spec,
        **family.model_kwargs(hf_config),
    )
    if torch.cuda.is_available():
        model.cuda(torch.cuda.current_device())
    return model


def _model_class(mtp_layers: int):
    """megatron's GPTModel, or with MTP layers ours, which keeps them out of the logits."""
    from megatron.core.models.gpt import GPTModel

    if not mtp_layers:
        return GPTModel
    from slime_megatron.models.mtp_model import MTPGPTModel

    return MTPGPTModel


def _without_transformer_engine() -> None:
    """Two places where megatron-core 0.16.1 misses that Transformer Engine is not installed.

    Its MoE router calls ``moe_utils.te_general_gemm`` when it is not None, but never defines
    it (a NameError on the first MoE forward): define it as None, so the router uses its plain
    torch matmul. Its multi-latent attention imports TE's classes from a module that stands in
    mocks for them, and so believes TE is there (``isinstance(layer, <mock>)`` then raises):
    tell it that TE is not."""
    import importlib.util

    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    if importlib.util.find_spec("transformer_engine") is None:
        multi_latent_attention.HAVE_TE = False
