"""THUDM/slime's own ``train.py`` flags that this slime has no option of that name for.

slime's flags that we share by name (``--rollout-batch-size``, ``--use-kl-loss``, ...) are
ordinary options; the ``--*-path`` function hooks are handled by the custom-path plugins. Each
entry here is an alias of one of our options, or says why it changes nothing here (a feature
we do not have, or one that is always on).
"""

from __future__ import annotations

from slime_core.config.accepted_flags import Accepted

_NOT_YET = "not implemented in this slime yet"
_WANDB = "W&B reads its login, entity and host from `wandb login` / WANDB_* environment variables"
_TB = "TensorBoard files go to <output-dir>/tensorboard"
_CI = "slime's own CI checks; not part of this slime"
_DEEPGEMM = "a DeepGEMM forward path of slime's Megatron backend; the backends choose their own kernels"
_OFFLOAD = (
    "colocated runs (--colocate) take turns on the devices as the loop decides; there is no separate offload switch"
)
_LOGPROBS_MEMORY = "the backends bound log-prob memory by --max-tokens-per-gpu (there is no separate chunking)"

SLIME_FLAGS: tuple[Accepted, ...] = (
    # same meaning, another name here
    Accepted("--sglang-server-concurrency", type=int, alias="rollout_concurrency"),
    # checkpoint retention as slime's open pull requests name it (THUDM/slime#1914, #1798)
    Accepted("--max-checkpoint-count", type=int, alias="save_retain_count"),
    Accepted("--max-actor-ckpt-to-keep", type=int, alias="save_retain_count"),
    Accepted(
        "--max-critic-ckpt-to-keep",
        type=int,
        reason="a critic's checkpoints are kept and deleted with the policy's: --save-retain-count counts both",
    ),
    # data and rollout
    Accepted("--balance-data", reason="train data is always split over the data-parallel ranks balanced by tokens"),
    Accepted("--balance-by-flops", reason="train data is balanced by tokens, not by estimated FLOPs"),
    Accepted(
        "--rollout-skip-special-tokens", reason="responses are decoded as the engine returns them (special tokens kept)"
    ),
    Accepted(
        "--disable-rollout-global-dataset", reason="prompts always come from the --data-source (the global dataset)"
    ),
    Accepted(
        "--start-rollout-id", type=int, reason="the first rollout id comes from the checkpoint in --load (0 without)"
    ),
    Accepted(
        "--min-batch-collection-ratio",
        type=float,
        reason="slime reads it nowhere now (its former rollout-buffer rollout waited for this share of a batch); "
        "--rollout-buffer-url here collects whole batches",
    ),
    Accepted(
        "--loss-mask-type",
        type=str,
        reason="the loss mask comes from the chat template's rendering of each turn, for every model family",
    ),
    Accepted(
        "--rollout-data-transport", type=str, reason="rollout data reaches the train ranks through Ray's object store"
    ),
    Accepted(
        "--rollout-health-check-first-wait",
        type=float,
        reason="engines are health-checked once they answer (--rollout-health-check-interval)",
    ),
    Accepted("--http-proxy", type=str, reason="the engines are reached directly or through --router"),
    Accepted("--use-distributed-post", reason="requests are sent from the rollout process"),
    Accepted(
        "--load-forge-rollout-data",
        type=str,
        reason="slime/rollout/forge_load.py documents only the path (a file, or a {rollout_id} template); the file is "
        "a torch.save pickle, loaded with weights_only=False, of its own Sample.to_dict() records (no documented "
        "format: whatever its Sample class holds); replay rollouts this slime saved (--save-debug-rollout-data, JSON) "
        "with --load-debug-rollout-data",
    ),
    Accepted(
        "--save-debug-train-data",
        type=str,
        reason="save the rollouts with --save-debug-rollout-data or --dump-rollouts",
    ),
    Accepted("--dump-details", type=str, reason="write every rollout's samples with --dump-rollouts"),
    # algorithm and training
    Accepted(
        "--disable-compute-advantages-and-returns",
        reason="advantages are always computed; supervised training (--loss-type sft_loss) does not use them",
    ),
    Accepted("--log-probs-chunk-size", type=int, reason=_LOGPROBS_MEMORY),
    Accepted("--log-probs-max-tokens-per-gpu", type=int, reason=_LOGPROBS_MEMORY),
    Accepted(
        "--use-opd",
        reason="on-policy distillation is on when --opd-teacher-load names the teacher, or when the samples carry "
        "teacher_log_probs (slime's OPD post-process sets them from the teacher at --rm-url)",
    ),
    Accepted(
        "--opd-type",
        type=str,
        reason="the teacher follows from the launch: samples carrying teacher_log_probs (slime's 'sglang': the "
        "teacher at --rm-url) or --opd-teacher-load (the train ranks' teacher, slime's 'megatron')",
    ),
    Accepted("--opd-teacher-ckpt-step", type=int, reason="--opd-teacher-load is a Hugging Face directory"),
    Accepted(
        "--ref-ckpt-step",
        type=int,
        reason="a Megatron --ref-load is read at the iteration its latest_checkpointed_iteration.txt names",
    ),
    Accepted("--keep-old-actor", reason="π_old is recomputed by the actor before each train step"),
    Accepted("--recompute-loss-function", reason="the loss is computed once per micro-batch"),
    Accepted("--use-stateless-adam", reason="the backends use AdamW"),
    Accepted("--allgather-cp", reason="context parallelism is slime-megatron's (--context-parallel-size)"),
    Accepted("--data-pad-size-multiplier", type=int, reason="micro-batches are padded as the backend needs"),
    Accepted("--qwen-gdn-backend", type=str, reason=_DEEPGEMM),
    *(
        Accepted(flag, type=str, nargs="+", reason=_DEEPGEMM)
        for flag in (
            "--megatron-deepgemm-forward-layers",
            "--megatron-deepgemm-forward-modules",
            "--megatron-deepgemm-moe-forward-layers",
            "--megatron-deepgemm-moe-forward-modules",
        )
    ),
    Accepted("--model-name", type=str, reason="the model family comes from config.json's model_type"),
    Accepted("--train-env-vars", type=str, reason="set environment variables before `slime run`; Ray passes them on"),
    # placement, offload, weight updates
    Accepted(
        "--num-gpus-per-node",
        type=int,
        reason="engines are placed by --rollout-num-gpus and --rollout-num-gpus-per-engine",
    ),
    *(
        Accepted(flag, reason=_OFFLOAD)
        for flag in ("--offload", "--offload-train", "--offload-rollout", "--release-train")
    ),
    Accepted(
        "--update-weight-disk-dir", type=str, reason="--update-weight-transport disk writes under <output-dir>/weights"
    ),
    Accepted(
        "--update-weight-disk-keep-files",
        reason="the disk transport keeps only the newest update's directory (under <output-dir>/weights)",
    ),
    Accepted(
        "--sglang-router-request-timeout-secs",
        type=int,
        reason="requests are bounded by the router's own timeouts (--router-* options)",
    ),
    # observability and CI
    *(Accepted(flag, type=str, reason=_WANDB) for flag in ("--wandb-key", "--wandb-team", "--wandb-host")),
    Accepted("--wandb-run-id", type=str, reason="each run is a new W&B run named by --wandb-run-name"),
    Accepted("--disable-wandb-random-suffix", reason="--wandb-run-name is used as given (no random suffix)"),
    Accepted("--wandb-always-use-train-step", reason="metrics are logged with the rollout id as the step"),
    Accepted("--tb-project-name", type=str, reason=_TB),
    Accepted("--tb-experiment-name", type=str, reason=_TB),
    Accepted("--log-multi-turn", reason="multi-turn samples are logged like the others"),
    Accepted("--log-passrate", reason="pass rates are reported for evaluation (pass@k)"),
    Accepted("--log-correct-samples", reason="--dump-rollouts writes every sample with its reward"),
    *(Accepted(flag, reason=_CI) for flag in ("--ci-test", "--ci-disable-kl-checker")),
    *(Accepted(flag, type=str, reason=_CI) for flag in ("--ci-save-grad-norm", "--ci-load-grad-norm")),
    Accepted("--ci-train-rollout-logprob-abs-diff-threshold", type=float, reason=_CI),
)
