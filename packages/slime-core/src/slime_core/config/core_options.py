"""The options slime-core declares (slime's flag names, so launch scripts port easily).

Backends, engines and the router declare their own options through the same hook.
"""

from __future__ import annotations

from slime_core.config.no_effect import add_core_rules
from slime_core.config.options import OptionSet


def add_core_options(options: OptionSet) -> None:
    """Declare every core option, grouped as `slime run --help` shows them, with the rules of
    when each acts (`slime_core.config.no_effect.RULES`)."""
    for add in (
        _run,
        _cluster,
        _data,
        _rollout,
        _reward,
        _algorithm,
        _training,
        _weights,
        _checkpoint,
        _fault_tolerance,
        _debug,
        _observability,
        _compatibility,
    ):
        add(options)
    add_core_rules(options)


def _run(o: OptionSet) -> None:
    g = "run"
    o.add("--output-dir", help="run directory (config, logs, metrics, checkpoints); default runs/<timestamp>", group=g)
    o.add(
        "--train-mode",
        default="sync",
        choices=["sync", "async"],
        help="overlap generation with training (async)",
        group=g,
    )
    o.add(
        "--dry-run",
        type=bool,
        default=False,
        help="print the resolved config and the plugins that would run, then exit",
        group=g,
    )
    o.add("--num-rollout", type=int, default=None, help="number of rollouts (generate + train iterations)", group=g)
    o.add(
        "--num-epoch",
        type=int,
        default=None,
        help="without --num-rollout: run num_epoch × (prompts // --rollout-batch-size) rollouts (slime's rule)",
        group=g,
    )
    o.add("--seed", type=int, default=1234, help="random seed for training", group=g)
    o.add(
        "--max-staleness",
        type=int,
        default=None,
        help="async: drop groups generated more than this many weight versions ago (counted in "
        "rollout/stale_groups_dropped)",
        group=g,
    )
    o.add(
        "--dump-rollouts",
        type=bool,
        default=False,
        help="write every rollout's samples (tokens, response, reward, loss mask, log-probs) to "
        "<output-dir>/rollouts/rollout_NNNNNN.jsonl",
        group=g,
    )
    o.add(
        "--eval-interval",
        type=int,
        default=None,
        help="evaluate on --eval-prompt-data every N rollouts (and before the first and after the last)",
        group=g,
    )


def _cluster(o: OptionSet) -> None:
    g = "cluster"
    o.add("--actor-num-nodes", type=int, default=1, help="nodes for the training actor", group=g)
    o.add("--actor-num-gpus-per-node", type=int, default=1, help="GPUs (or CPU ranks) per node for training", group=g)
    o.add("--rollout-num-gpus", type=int, default=None, help="GPUs for rollout engines (disaggregated mode)", group=g)
    o.add(
        "--rollout-num-gpus-per-engine",
        type=int,
        default=1,
        help="GPUs per rollout engine (its tensor-parallel size)",
        group=g,
    )
    o.add("--colocate", type=bool, default=False, help="training and rollout share devices, taking turns", group=g)
    o.add(
        "--ray-address",
        default=None,
        help="attach to this running Ray cluster (HOST:PORT, or 'auto'; default: $RAY_ADDRESS, else start a local Ray "
        "for the run); an attached cluster is left as it was found",
        group=g,
    )
    o.add(
        "--train-node-resource",
        default=None,
        help="Ray custom resource a node must have to hold train ranks (and the critic): start those nodes with `ray "
        "start --resources '{\"NAME\": 1}'`",
        group=g,
    )
    o.add(
        "--rollout-node-resource",
        default=None,
        help="Ray custom resource a node must have to hold rollout engines (not with --colocate, where engines share "
        "the ranks' devices)",
        group=g,
    )
    o.add(
        "--actor-runtime",
        default="ray",
        choices=["ray", "inprocess"],
        help="ray: train ranks and engines are Ray actors; inprocess: no Ray, one train rank in this process "
        "(debugging, and backends that start no process of their own)",
        group=g,
    )


def _data(o: OptionSet) -> None:
    g = "data"
    o.add("--prompt-data", required=True, help="JSONL or Parquet prompts; path@[start:end] uses a slice", group=g)
    o.add("--input-key", default="prompt", help="record key holding the prompt (text or chat messages)", group=g)
    o.add("--label-key", default="label", help="record key holding the label; '' for none", group=g)
    o.add("--metadata-key", default="metadata", help="record key holding per-sample metadata", group=g)
    o.add("--tool-key", default="tools", help="record key holding tool schemas for the chat template", group=g)
    o.add(
        "--apply-chat-template",
        type=bool,
        default=False,
        help="render prompts with the tokenizer's chat template",
        group=g,
    )
    o.add("--rollout-max-prompt-len", type=int, default=None, help="drop prompts longer than this many tokens", group=g)
    o.add(
        "--rollout-max-context-len",
        type=int,
        default=None,
        group=g,
        help="prompt plus response tokens a rollout may hold (slime's meaning): --rollout-max-prompt-len "
        "defaults to one less, so every kept prompt leaves room for a trained token",
    )
    o.add("--rollout-shuffle", type=bool, default=True, help="shuffle prompts each epoch", group=g)
    o.add("--rollout-seed", type=int, default=42, help="seed of the prompt order", group=g)
    o.add("--data-source", default="prompt", help="registered data source", group=g)
    o.add(
        "--buffer-filter", default="fifo", help="registered buffer filter: which partial groups go out first", group=g
    )
    o.add("--eval-prompt-data", nargs="+", default=None, help="NAME PATH pairs of evaluation prompts", group=g)


def _rollout(o: OptionSet) -> None:
    g = "rollout"
    o.add("--rollout-batch-size", type=int, required=True, help="prompt groups per rollout", group=g)
    o.add("--n-samples-per-prompt", type=int, default=1, help="responses generated per prompt (group size)", group=g)
    o.add("--rollout-max-response-len", type=int, default=1024, help="maximum new tokens per response", group=g)
    o.add("--rollout-temperature", type=float, default=1.0, help="sampling temperature", group=g)
    o.add(
        "--rollout-top-p",
        type=float,
        default=1.0,
        group=g,
        help="nucleus sampling threshold; below 1, training scores each token over the nucleus the engine drew it "
        "from, which the engine must return (the CPU engine does; SGLang needs slime's top-p patch)",
    )
    o.add("--rollout-top-k", type=int, default=-1, help="top-k sampling (-1: off)", group=g)
    o.add("--rollout-stop", nargs="+", default=None, help="stop strings", group=g)
    o.add(
        "--over-sampling-batch-size",
        type=int,
        default=None,
        help="prompt groups submitted at once (>= rollout batch)",
        group=g,
    )
    o.add("--partial-rollout", type=bool, default=False, help="continue aborted groups in a later rollout", group=g)
    o.add(
        "--mask-offpolicy-in-partial-rollout",
        type=bool,
        default=False,
        help="do not train on tokens a partial rollout made with older weights",
        group=g,
    )
    o.add(
        "--rollout-concurrency",
        type=int,
        default=512,
        help="samples being generated at once, per engine (each engine batches what it has; too few starve it)",
        group=g,
    )
    o.add(
        "--rollout-group-requests",
        type=bool,
        default=True,
        help="send a fresh group as one request for its n samples (sampling_params.n) when the default generate "
        "function is used; off: one request per sample",
        group=g,
    )
    o.add("--rollout-stop-token-ids", type=int, nargs="+", default=None, help="token ids that end a response", group=g)
    o.add(
        "--dynamic-sampling-max-groups",
        type=int,
        default=10,
        help="stop a rollout whose filter kept too few groups after this many x --rollout-batch-size were generated",
        group=g,
    )
    o.add(
        "--n-samples-per-eval-prompt",
        type=int,
        default=1,
        help="responses per evaluation prompt (pass@k uses them)",
        group=g,
    )
    o.add(
        "--eval-max-response-len",
        type=int,
        default=None,
        help="evaluation: maximum new tokens (default: the rollout's)",
        group=g,
    )
    o.add(
        "--eval-temperature",
        type=float,
        default=None,
        help="evaluation: sampling temperature (default: the rollout's)",
        group=g,
    )
    o.add(
        "--eval-top-p", type=float, default=None, help="evaluation: nucleus threshold (default: the rollout's)", group=g
    )
    o.add("--eval-top-k", type=int, default=None, help="evaluation: top-k (default: the rollout's)", group=g)
    o.add(
        "--rollout-backend",
        default="sglang",
        help="registered rollout backend: starts and controls the engines (slime-sglang: sglang)",
        group=g,
    )
    o.add(
        "--router",
        default="sglang",
        help="registered router in front of the engines (slime-router: sglang), or none: the engines in turn, no "
        "router process",
        group=g,
    )
    o.add("--rollout-function", default="default", help="registered rollout function", group=g)
    o.add("--generate-function", default="default", help="registered per-sample generate function", group=g)
    o.add(
        "--eval-function",
        default="default",
        help="registered evaluation function (used with --eval-prompt-data)",
        group=g,
    )
    o.add(
        "--dynamic-sampling-filter",
        default=None,
        help="registered filter that accepts or rejects whole groups",
        group=g,
    )
    o.add(
        "--sample-filter",
        nargs="+",
        default=None,
        help="registered filters that drop single samples from training",
        group=g,
    )
    o.add(
        "--sample-hook",
        nargs="+",
        default=None,
        group=g,
        help="registered hooks the default rollout applies, in order, to each sample it generates, before its reward",
    )
    o.add(
        "--all-groups-hook",
        nargs="+",
        default=None,
        group=g,
        help="registered hooks the default rollout calls with every group it generated, filtered-out ones included",
    )


def _reward(o: OptionSet) -> None:
    g = "reward"
    o.add(
        "--rm-type", default=None, help="registered reward function (per-sample metadata['rm_type'] overrides)", group=g
    )
    o.add("--reward-key", default=None, help="key of a dict reward to train on", group=g)
    o.add("--group-rm", type=bool, default=False, help="the reward function scores a whole group at once", group=g)
    o.add("--rm-timeout", type=float, default=30.0, help="seconds one reward call may take", group=g)
    o.add("--rm-max-concurrency", type=int, default=64, help="reward calls in flight at once", group=g)
    o.add(
        "--rm-failure-reward",
        type=float,
        default=None,
        help="reward for samples whose reward call failed (default: drop them)",
        group=g,
    )
    o.add(
        "--drop-nonfinite-rewards",
        type=bool,
        default=False,
        group=g,
        help="a reward that is NaN or infinite fails its sample, as one whose reward call raised (counted in "
        "reward/non_finite), instead of stopping the run with an error naming the function and the sample",
    )
    o.add(
        "--reward-post-process",
        default=None,
        group=g,
        help="registered reward post-processor: fn(samples, config) -> (raw_rewards, rewards); the rewards are "
        "trained on as they are, instead of the estimator's group normalisation, and the raw ones are logged",
    )


def _algorithm(o: OptionSet) -> None:
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


def _training(o: OptionSet) -> None:
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


def _weights(o: OptionSet) -> None:
    g = "weight updates"
    o.add(
        "--update-weight-transport",
        default=None,
        choices=["tensor", "broadcast", "disk"],
        help="how new weights reach the engines: tensor (in memory over HTTP; the default when colocated or on CPU), "
        "broadcast (a collective: nccl on GPU, gloo on CPU; the default when disaggregated on GPUs), disk (a Hugging "
        "Face directory both sides can read)",
        group=g,
    )
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


def _checkpoint(o: OptionSet) -> None:
    g = "checkpoint"
    o.add("--save", default=None, help="checkpoint directory", group=g)
    o.add("--save-interval", type=int, default=None, help="save every N rollouts", group=g)
    o.add("--load", default=None, help="checkpoint directory to resume from", group=g)
    o.add(
        "--ckpt-step",
        type=int,
        default=None,
        group=g,
        help="resume from the checkpoint --load holds for this rollout (its iter_XXXXXXX) instead of the latest, "
        "as Megatron-LM's --ckpt-step",
    )
    o.add(
        "--save-hf", default=None, help="also write a Hugging Face model directory here with each checkpoint", group=g
    )
    o.add(
        "--save-retain-count",
        type=int,
        default=None,
        group=g,
        help="keep only the newest N checkpoints under --save (each with its critic and rollout state), deleting "
        "older ones after each save, never the one the run resumed from (default: keep all; --save-hf "
        "exports are kept); slime's proposed --max-checkpoint-count and --max-actor-ckpt-to-keep are aliases",
    )
    o.add(
        "--ref-load",
        default=None,
        group=g,
        help="the reference model (default: --hf-checkpoint): a Hugging Face directory, or a Megatron checkpoint "
        "(slime's *_torch_dist), which as in slime is also the starting policy while --load holds none",
    )
    o.add(
        "--opd-teacher-load", default=None, help="Hugging Face directory of the on-policy distillation teacher", group=g
    )


def _fault_tolerance(o: OptionSet) -> None:
    g = "Fault tolerance"
    o.add(
        "--use-fault-tolerance",
        type=bool,
        default=False,
        help="replace rollout engines that die or hang (health-checked), bring them to the current weights, and "
        "generate their unfinished samples again",
        group=g,
    )
    o.add(
        "--rollout-health-check-interval",
        type=float,
        default=10.0,
        help="seconds between two /health checks of every engine (always; a failed engine stops the run unless "
        "--use-fault-tolerance replaces it)",
        group=g,
    )
    o.add(
        "--rollout-health-check-timeout",
        type=float,
        default=30.0,
        help="an engine that does not answer /health within this many seconds counts as hung",
        group=g,
    )
    o.add("--max-engine-restarts", type=int, default=10, help="engine replacements before the run gives up", group=g)
    o.add(
        "--generate-max-retries",
        type=int,
        default=8,
        help="times a sample whose engine failed is generated again (waiting 1, 2, 4 ... 10 s); a failure that an "
        "engine replacement explains (--use-fault-tolerance) is retried without counting",
        group=g,
    )


def _debug(o: OptionSet) -> None:
    g = "Debugging"
    o.add(
        "--debug-rollout-only",
        type=bool,
        default=False,
        help="generate and score rollouts without training (no train ranks are started)",
        group=g,
    )
    o.add(
        "--debug-train-only",
        type=bool,
        default=False,
        help="train without engines, on rollouts replayed from --load-debug-rollout-data",
        group=g,
    )
    o.add(
        "--save-debug-rollout-data",
        default=None,
        help="save each rollout's samples and metrics to this path; {rollout_id} in it is replaced (e.g. "
        "dbg/rollout_{rollout_id}.json)",
        group=g,
    )
    o.add(
        "--load-debug-rollout-data",
        default=None,
        help="replay rollouts saved by --save-debug-rollout-data into training instead of generating (implies "
        "--debug-train-only)",
        group=g,
    )


def _observability(o: OptionSet) -> None:
    """Trackers that receive every metrics.jsonl record (see slime_core.loop.trackers)."""
    g = "observability"
    o.add(
        "--use-tensorboard",
        type=bool,
        default=False,
        help="write every metric as a TensorBoard scalar to <output-dir>/tensorboard (step = rollout id); needs "
        "slime-core[tensorboard]",
        group=g,
    )
    o.add(
        "--use-wandb",
        type=bool,
        default=False,
        help="log metrics, the resolved config and the installed plugins to Weights & Biases; needs slime-core[wandb]",
        group=g,
    )
    o.add("--wandb-project", default="slime", help="W&B project", group=g)
    o.add("--wandb-group", default=None, help="W&B group (e.g. one per experiment with several seeds)", group=g)
    o.add("--wandb-run-name", default=None, help="W&B run name (default: the output directory's name)", group=g)
    o.add(
        "--wandb-mode",
        default=None,
        choices=["online", "offline"],
        help="online (needs `wandb login` or WANDB_API_KEY) or offline (files only; `wandb sync` uploads them later); "
        "default: W&B's own, online unless WANDB_MODE says otherwise",
        group=g,
    )
    o.add(
        "--wandb-dir",
        default=None,
        help="folder W&B writes its files into (default: the output directory, so they land in <output-dir>/wandb)",
        group=g,
    )


def _compatibility(o: OptionSet) -> None:
    """Flags of slime's and Megatron-LM's launch scripts that have no option of that name here."""
    from slime_core.config.accepted_flags import declare
    from slime_core.config.megatron_lm_flags import MEGATRON_LM_FLAGS
    from slime_core.config.slime_flags import SLIME_FLAGS

    declare(o, SLIME_FLAGS, "accepted from slime's train.py (see docs/coming-from-slime.md)")
    declare(o, MEGATRON_LM_FLAGS, "accepted Megatron-LM flags (see docs/coming-from-slime.md)")
