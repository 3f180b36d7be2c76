"""Megatron-LM flags that slime's launch scripts pass (``MODEL_ARGS``, ``PERF_ARGS``, ...) and
that no backend of ours declares.

They are declared in core, so a script keeps its ``MODEL_ARGS`` whichever ``--train-backend``
it picks. Both backends build the model from ``--hf-checkpoint``'s config.json: the sizes
below are checked against it (a mismatch is an error naming both values), the other
architecture switches describe what config.json says already. The parallel sizes,
recomputation and the distributed optimizer are slime-megatron's own options.
"""

from __future__ import annotations

from slime_core.config.accepted_flags import Accepted

_ARCH = "the model is built from --hf-checkpoint's config.json, which already describes this"
_KERNEL = "a Megatron-LM kernel or fusion choice; the backends choose their own kernels"
_MOE_RUNTIME = "a Megatron-LM MoE runtime choice (token dispatch, kernels); the backends choose their own"
_OPTIMIZER_PLACEMENT = "the optimizer runs on the training devices in float32; there is no CPU-offloaded optimizer"
_DROPOUT = "dropout comes from config.json (RL fine-tuning of these models uses none)"
_FP8 = "FP8 training is not implemented here: the backends train in --bf16 or float32"


def _size(flag: str, *hf_keys: str, kind: type = int) -> Accepted:
    return Accepted(flag, type=kind, hf_keys=hf_keys)


MEGATRON_LM_FLAGS: tuple[Accepted, ...] = (
    # architecture sizes: checked against config.json
    _size("--num-layers", "num_hidden_layers"),
    _size("--hidden-size", "hidden_size"),
    _size("--ffn-hidden-size", "intermediate_size"),
    _size("--num-attention-heads", "num_attention_heads"),
    _size("--num-query-groups", "num_key_value_heads"),
    _size("--kv-channels", "head_dim"),
    _size("--vocab-size", "vocab_size"),
    _size("--max-position-embeddings", "max_position_embeddings"),
    _size("--rotary-base", "rope_theta", kind=float),
    _size("--norm-epsilon", "rms_norm_eps", "layer_norm_eps", kind=float),
    _size("--num-experts", "num_experts", "n_routed_experts", "num_local_experts"),
    _size("--moe-router-topk", "num_experts_per_tok", "moe_topk"),
    _size("--moe-ffn-hidden-size", "moe_intermediate_size"),
    _size("--moe-shared-expert-intermediate-size", "shared_expert_intermediate_size"),
    _size("--kv-lora-rank", "kv_lora_rank"),
    _size("--q-lora-rank", "q_lora_rank"),
    _size("--qk-head-dim", "qk_nope_head_dim"),
    _size("--qk-pos-emb-head-dim", "qk_rope_head_dim"),
    _size("--v-head-dim", "v_head_dim"),
    Accepted("--untie-embeddings-and-output-weights", hf_keys=("tie_word_embeddings",), hf_value=False),
    Accepted("--swiglu", hf_keys=("hidden_act",), hf_value="silu"),
    # Llama 3.x's rope scaling (slime's Llama-3.1 model script): config.json's rope type must be llama3
    Accepted("--use-rope-scaling", hf_keys=("rope_type",), hf_value="llama3"),
    # architecture switches and choices: config.json says them already
    *(
        Accepted(flag, reason=_ARCH)
        for flag in (
            "--group-query-attention",
            "--qk-layernorm",
            "--disable-bias-linear",
            "--add-qkv-bias",
            "--apply-layernorm-1p",
            "--multi-latent-attention",
            "--use-rotary-position-embeddings",
            "--no-position-embedding",
            "--rotary-interleaved",
            "--moe-router-pre-softmax",
            "--moe-router-enable-expert-bias",
            "--moe-shared-expert-gate",
            "--post-mlp-layernorm",
            "--post-self-attn-layernorm",
            "--attention-output-gate",
            "--use-gated-attention",
        )
    ),
    *(
        Accepted(flag, type=str, reason=_ARCH)
        for flag in (
            "--normalization",
            "--position-embedding-type",
            "--moe-router-score-function",
            "--moe-router-load-balancing-type",
            "--moe-layer-freq",
        )
    ),
    *(
        Accepted(flag, type=float, reason=_ARCH)
        for flag in (
            "--rotary-percent",
            "--rotary-scaling-factor",
            "--mscale",
            "--mscale-all-dim",
            "--moe-router-topk-scaling-factor",
        )
    ),
    *(Accepted(flag, type=int, reason=_ARCH) for flag in ("--moe-router-num-groups", "--moe-router-group-topk")),
    Accepted(
        "--make-vocab-size-divisible-by",
        type=int,
        reason="the embedding keeps config.json's vocab_size (Megatron-LM would pad it)",
    ),
    Accepted(
        "--spec",
        type=str,
        nargs="+",
        reason="slime-megatron builds its layer spec from config.json (there is no module to name)",
    ),
    # kernels, fusions and numerics
    *(
        Accepted(flag, reason=_KERNEL)
        for flag in (
            "--no-masked-softmax-fusion",
            "--no-rope-fusion",
            "--no-gradient-accumulation-fusion",
            "--no-bias-swiglu-fusion",
            "--no-bias-dropout-fusion",
            "--moe-grouped-gemm",
            "--moe-permute-fusion",
            "--moe-enable-deepep",
            "--enable-experimental",
        )
    ),
    Accepted("--attention-backend", type=str, reason=_KERNEL),
    Accepted("--transformer-impl", type=str, reason=_KERNEL),
    Accepted(
        "--accumulate-allreduce-grads-in-fp32",
        reason="gradients are reduced and accumulated in float32 already (float32 master weights with --bf16)",
    ),
    Accepted("--attention-softmax-in-fp32", reason="the attention softmax runs in float32 already"),
    Accepted("--deterministic-mode", reason="deterministic kernels are not forced; --seed fixes the random state"),
    Accepted("--fp8-format", type=str, reason=_FP8),
    Accepted("--fp8-recipe", type=str, reason=_FP8),
    Accepted("--fp8-param-gather", reason=_FP8),
    # MoE runtime
    *(
        Accepted(flag, type=str, reason=_MOE_RUNTIME)
        for flag in ("--moe-token-dispatcher-type", "--moe-token-drop-policy", "--moe-router-dtype")
    ),
    Accepted(
        "--moe-aux-loss-coeff", type=float, reason="no MoE auxiliary load-balancing loss is added in RL training here"
    ),
    Accepted("--moe-router-bias-update-rate", type=float, reason="the expert bias is not updated during training here"),
    # optimizer
    Accepted(
        "--optimizer",
        type=str,
        reason="the backends always use AdamW (--adam-beta1/--adam-beta2/--adam-eps, --weight-decay), "
        "which is Megatron-LM's 'adam'",
    ),
    *(
        Accepted(flag, reason=_OPTIMIZER_PLACEMENT)
        for flag in ("--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer")
    ),
    Accepted(
        "--lr-warmup-fraction",
        type=float,
        reason="warmup is counted in optimizer steps: give --lr-warmup-iters N instead",
    ),
    # dropout (the pipeline layout and MTP flags are slime-megatron's own options)
    Accepted("--attention-dropout", type=float, reason=_DROPOUT),
    Accepted("--hidden-dropout", type=float, reason=_DROPOUT),
)
