"""The options of running a run: mode, cluster, checkpoints, fault tolerance, debugging and
observability (core options; `slime_core.config.core_options` declares them in help order).
"""

from __future__ import annotations

from slime_core.config.options import OptionSet


def run_options(o: OptionSet) -> None:
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


def cluster_options(o: OptionSet) -> None:
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


def checkpoint_options(o: OptionSet) -> None:
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


def fault_tolerance_options(o: OptionSet) -> None:
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


def debug_options(o: OptionSet) -> None:
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
    o.add(
        "--load-debug-rollout-data-subsample",
        type=float,
        default=None,
        help="replay only this share of each saved rollout's samples (slime's: the first and last halves of it)",
        group=g,
    )


def observability_options(o: OptionSet) -> None:
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
