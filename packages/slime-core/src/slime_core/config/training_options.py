"""The options of training: the RL algorithm, the optimizer and batches, and weight sync (core
options; `slime_core.config.core_options` declares them in help order).
"""

from __future__ import annotations

from slime_core.config.options import OptionSet


def algorithm_options(o: OptionSet) -> None:
    g = "algorithm"
    o.add(
        "--advantage-estimator",
        default="grpo",
        help="registered advantage estimator (`slime plugins` lists them)",
        group=g,
    )
    o.add(
        "--loss-type",
        default="policy_loss",
        help="registered loss: policy_loss (follows the estimator), ppo, gspo, cispo, sft_loss",
        group=g,
    )
    o.add("--eps-clip", type=float, default=0.2, help="PPO clip range (low side)", group=g)
    o.add("--eps-clip-high", type=float, default=None, help="PPO clip range, high side (default: --eps-clip)", group=g)
    o.add("--eps-clip-c", type=float, default=None, help="dual-clip constant (> 1)", group=g)
    o.add("--kl-coef", type=float, default=0.0, help="KL penalty in the reward (REINFORCE++)", group=g)
    o.add("--use-kl-loss", type=bool, default=False, help="add a KL loss to the reference model", group=g)
    o.add("--kl-loss-coef", type=float, default=0.0, help="weight of the KL loss", group=g)
    o.add(
        "--kl-loss-type", default="low_var_kl", choices=["k1", "k2", "k3", "low_var_kl"], help="KL estimator", group=g
    )
    o.add("--entropy-coef", type=float, default=0.0, help="entropy bonus weight", group=g)
    o.add(
        "--use-rollout-entropy",
        type=bool,
        default=False,
        help="compute π_old's entropy in the trainer's old log-prob pass (and the reference model's in its pass) and "
        "log its mean over the response tokens as train/rollout_entropy (train/rollout_ref_entropy), slime's "
        "rollout/entropy (rollout/ref_entropy); the old log-prob pass runs even where the step's forward could stand "
        "for π_old",
        group=g,
    )
    o.add("--gamma", type=float, default=1.0, help="discount factor", group=g)
    o.add("--lambd", type=float, default=1.0, help="GAE lambda", group=g)
    o.add("--normalize-advantages", type=bool, default=False, help="whiten advantages over the batch", group=g)
    o.add(
        "--disable-rewards-normalization",
        type=bool,
        default=False,
        help="group estimators (grpo, gspo, cispo, dr_grpo, reinforce_plus_plus_baseline) use the raw rewards, not "
        "centred per group",
        group=g,
    )
    o.add(
        "--disable-grpo-std-normalization",
        type=bool,
        default=False,
        help="Dr.GRPO: grpo, gspo and cispo subtract the group mean but do not divide by the group std",
        group=g,
    )
    o.add("--calculate-per-token-loss", type=bool, default=False, help="token-mean loss over the global batch", group=g)
    o.add(
        "--use-constant-denominator",
        type=bool,
        default=False,
        help="Dr.GRPO: divide by samples x max response length",
        group=g,
    )
    o.add("--use-unbiased-kl", type=bool, default=False, help="weight the KL loss by the importance ratio", group=g)
    o.add(
        "--use-tis",
        type=bool,
        default=False,
        help="correct the rollout/train mismatch with importance weights",
        group=g,
    )
    o.add(
        "--tis-mode",
        default="truncate",
        group=g,
        help="registered TIS function: truncate (TIS), icepop (zero outside the band) or a plugin's",
    )
    o.add(
        "--pg-loss-reducer",
        default=None,
        group=g,
        help="registered pg-loss reducer for the policy-gradient term alone (default: the other terms' reduction)",
    )
    o.add("--tis-clip", type=float, default=2.0, help="upper bound of the mismatch weight", group=g)
    o.add(
        "--tis-clip-low", type=float, default=0.0, help="lower bound of the mismatch weight (ICEPOP: e.g. 0.5)", group=g
    )
    o.add(
        "--get-mismatch-metrics",
        type=bool,
        default=False,
        group=g,
        help="report the rollout/train mismatch metrics (tis_* or icepop_* by --tis-mode) without reweighting the "
        "loss (slime's documented behaviour; --use-tis reweights)",
    )
    o.add(
        "--use-rollout-logprobs",
        type=bool,
        default=False,
        group=g,
        help="measure the PPO ratio against the engine's log-probs (π/π_rollout) instead of the trainer's π_old; "
        "excludes --use-tis (mismatch metrics still use π_old)",
    )
    o.add(
        "--use-routing-replay",
        type=bool,
        default=False,
        group=g,
        help="MoE: record the trainer's routing when it computes π_old and replay it in every update of the "
        "rollout (R2, slime_core.routing_replay)",
        acts_when=lambda c: c.num_steps_per_rollout > 1 or c.use_rollout_routing_replay,
        no_effect="with one optimizer step per rollout the update's weights are π_old's, which route the same; "
        "it acts with --num-steps-per-rollout > 1",
    )
    o.add(
        "--use-rollout-routing-replay",
        type=bool,
        default=False,
        group=g,
        help="MoE: the engines return each token's routed experts and the trainer routes to them for π_old and "
        "every update (R3, slime_core.routing_replay); implies --use-routing-replay",
    )
    o.add(
        "--use-opsm",
        type=bool,
        default=False,
        group=g,
        help="off-policy sequence masking: drop the negative-advantage tokens of samples whose mean "
        "log π_old - log π exceeds --opsm-delta",
    )
    o.add("--opsm-delta", type=float, default=1e-4, help="OPSM threshold on a sample's mean log π_old - log π", group=g)
    o.add(
        "--rollout-id-key",
        default=None,
        group=g,
        help="Sample metadata key naming the rollout a sample comes from (slime's Sample.rollout_id): samples of "
        "one prompt group with equal values are one rollout, which counts once in the per-sample loss mean and "
        "divides by its samples' tokens together (default: every sample is its own rollout)",
    )
    o.add(
        "--opd-kl-coef",
        type=float,
        default=0.0,
        help="on-policy distillation: weight of the teacher's reverse KL",
        group=g,
    )
    o.add("--value-clip", type=float, default=0.2, help="PPO critic: clip range of the value update", group=g)
    o.add(
        "--critic-load",
        default=None,
        help="PPO critic: Hugging Face directory of its body (default: --hf-checkpoint)",
        group=g,
    )
    o.add("--critic-lr", type=float, default=None, help="PPO critic: learning rate (default: --lr)", group=g)


def training_options(o: OptionSet) -> None:
    g = "training"
    o.add("--train-backend", default="fsdp", help="registered train backend: fsdp or megatron", group=g)
    o.add("--hf-checkpoint", required=True, help="Hugging Face model directory (weights, config, tokenizer)", group=g)
    o.add("--global-batch-size", type=int, default=None, help="samples per optimizer step (derived if unset)", group=g)
    o.add(
        "--num-steps-per-rollout",
        type=int,
        default=None,
        help="optimizer steps per rollout (derived if unset)",
        group=g,
    )
    o.add("--micro-batch-size", type=int, default=1, help="samples per forward/backward", group=g)
    o.add(
        "--true-on-policy-mode",
        type=bool,
        default=False,
        help="(miles's name) the engines report batch-invariant log-probs, and the trainer computes the same "
        "numbers for the same tokens (each sample alone in its forward pass): the rollout/train log-prob gap and "
        "the first step's ppo_kl are exactly 0; slower (see the README)",
        group=g,
    )
    o.add("--lr", type=float, default=1e-6, help="learning rate", group=g)
    o.add("--min-lr", type=float, default=0.0, help="learning rate at the end of the decay", group=g)
    o.add("--lr-warmup-iters", type=int, default=0, help="optimizer steps of linear warmup", group=g)
    o.add(
        "--lr-decay-style",
        default="constant",
        choices=["constant", "linear", "cosine"],
        help="learning-rate decay after warmup",
        group=g,
    )
    o.add(
        "--lr-decay-iters", type=int, default=None, help="optimizer steps over which the learning rate decays", group=g
    )
    o.add("--weight-decay", type=float, default=0.0, help="AdamW weight decay", group=g)
    o.add("--adam-beta1", type=float, default=0.9, help="AdamW beta1", group=g)
    o.add("--adam-beta2", type=float, default=0.999, help="AdamW beta2", group=g)
    o.add("--adam-eps", type=float, default=1e-8, help="AdamW epsilon", group=g)
    o.add("--clip-grad", type=float, default=1.0, help="gradient-norm clipping", group=g)
    o.add(
        "--check-for-nan-in-loss-and-grad",
        type=bool,
        default=True,
        group=g,
        help="an optimizer step whose loss or gradient norm is NaN or infinite is skipped on every rank (counted in "
        "train/skipped_steps) and --max-consecutive-skipped-steps of them in a row stop the run; off "
        "(--no-check-for-nan-in-loss-and-grad, slime's answer to NaN gradients): such steps are skipped and counted, "
        "and never stop the run",
    )
    o.add(
        "--max-consecutive-skipped-steps",
        type=int,
        default=3,
        group=g,
        help="stop the run after this many optimizer steps in a row were skipped for a non-finite loss or gradient "
        "norm (1: at the first, as Megatron-LM)",
    )
    o.add(
        "--distributed-timeout-minutes",
        type=float,
        default=10.0,
        group=g,
        help="how long a train rank waits for its peers in a collective (Megatron-LM's option and default): a rank "
        "that hangs (stopped, deadlocked) makes the others fail after this, and the run stops naming it",
    )
    o.add("--bf16", type=bool, default=False, help="bf16 compute with float32 master weights", group=g)
    o.add(
        "--use-dynamic-batch-size",
        type=bool,
        default=False,
        help="pack micro-batches up to --max-tokens-per-gpu tokens",
        group=g,
    )
    o.add("--max-tokens-per-gpu", type=int, default=None, help="token budget of a packed micro-batch", group=g)
    o.add(
        "--train-data-converter",
        default=None,
        group=g,
        help="registered train-data converter: fn(samples, config) -> RolloutBatch, instead of the built-in "
        "conversion of a rollout's samples into the batch the train ranks receive",
    )


def weights_options(o: OptionSet) -> None:
    g = "weight updates"
    o.add(
        "--update-weight-transport",
        default=None,
        choices=["tensor", "broadcast", "disk"],
        help="how new weights reach the engines: tensor (in memory over HTTP; the default when colocated or on CPU), "
        "broadcast (a collective: nccl on GPU, gloo on CPU; the default when disaggregated on GPUs, and for vLLM "
        "engines on CPU), disk (a Hugging Face directory both sides can read)",
        group=g,
    )
    _delta_options(o, g)
    o.add(
        "--update-weight-buffer-size",
        type=int,
        default=512 * 2**20,
        help="bytes of weights per bucket of an update",
        group=g,
    )
    o.add(
        "--update-weights-interval", type=int, default=1, help="push weights to the engines every N rollouts", group=g
    )
    o.add(
        "--check-weight-update-equal",
        type=bool,
        default=False,
        help="after each update, check that engine log-probs equal the trainer's on a probe",
        group=g,
    )


def _delta_options(o: OptionSet, g: str) -> None:
    """THUDM/slime's delta weight sync (`slime_core.loop.delta_sync`), with its names and defaults."""
    delta = (lambda c: c.update_weight_mode == "delta", "it applies with --update-weight-mode delta")
    o.add(
        "--update-weight-mode",
        default="full",
        choices=["full", "delta"],
        help="full: every update sends every weight; delta: only the bytes that changed since the last update "
        "(zstd-compressed per-tensor diffs, checksummed), which each engine host applies to its local checkpoint "
        "(--update-weight-local-checkpoint-dir) and loads; needs --update-weight-transport disk",
        group=g,
    )
    o.add(
        "--update-weight-delta-encoding",
        default="xor",
        choices=["xor", "overwrite"],
        help="xor: new ^ old, smallest, applied exactly once on its base; overwrite: the changed bytes' positions "
        "and new values, larger, idempotent",
        group=g,
        acts_when=delta[0],
        no_effect=delta[1],
    )
    o.add(
        "--update-weight-delta-checksum",
        default="xxh3-128",
        choices=["xxh3-128", "blake3", "adler32"],
        help="checksum of each tensor's new bytes, checked on every engine host before anything is applied",
        group=g,
        acts_when=delta[0],
        no_effect=delta[1],
    )
    o.add(
        "--update-weight-local-checkpoint-dir",
        default=None,
        help="each engine host's local copy of the served checkpoint, which delta updates patch and the engines "
        "load (required with --update-weight-mode delta)",
        group=g,
        acts_when=delta[0],
        no_effect=delta[1],
    )
