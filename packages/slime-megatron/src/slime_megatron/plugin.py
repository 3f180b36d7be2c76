"""slime-megatron's plugin module, found through the ``slime`` entry-point group.

Registers the Megatron-core train backend (``--train-backend megatron``), its options (the
Megatron pass-through flags) and ``slime convert``; its config checks are
`slime_megatron.checks`. It imports nothing heavy (the rank class
is named by a string, the rest is imported when used), so ``slime --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl
from slime_megatron.checks import (
    pick_megatron_when_its_options_are_given,
    validate,
)
from slime_megatron.hooks import HOOK_OPTIONS, PROVIDER_HELP

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "Megatron backend (slime-megatron)"

#: When a layer option acts (its model-parallel sizes are refused with another backend instead).
ONLY_MEGATRON = {
    "acts_when": lambda config: config.train_backend == "megatron",
    "no_effect": "it configures the Megatron backend (--train-backend megatron)",
}


@hookimpl
def slime_add_options(options):
    add = options.add
    add(
        "--tensor-model-parallel-size",
        type=int,
        default=1,
        help="tensor parallelism: split each layer's weights over this many ranks",
        group=GROUP,
    )
    add(
        "--pipeline-model-parallel-size",
        type=int,
        default=1,
        help="pipeline parallelism: split the layers over this many stages",
        group=GROUP,
    )
    for stage in ("first", "last"):
        add(
            f"--decoder-{stage}-pipeline-num-layers",
            type=int,
            default=None,
            help=f"layers on the {stage} pipeline stage (default: the layers split evenly over the stages); the "
            "stages without such a flag split the rest evenly",
            group=GROUP,
            **ONLY_MEGATRON,
        )
    add(
        "--num-layers-per-virtual-pipeline-stage",
        type=int,
        default=None,
        help="split each pipeline stage's layers into model chunks of this many layers, run by megatron's interleaved "
        "schedule (virtual pipeline stages: a smaller pipeline bubble)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--context-parallel-size",
        type=int,
        default=1,
        help="context parallelism: split each sequence over this many ranks",
        group=GROUP,
    )
    add(
        "--expert-model-parallel-size",
        type=int,
        default=1,
        help="expert parallelism: split a MoE layer's experts over this many ranks",
        group=GROUP,
    )
    add(
        "--expert-tensor-parallel-size",
        type=int,
        default=None,
        help="tensor parallelism inside each expert (default: --tensor-model-parallel-size)",
        group=GROUP,
    )
    add(
        "--sequence-parallel",
        type=bool,
        default=False,
        help="with tensor parallelism, also split norms and dropout over the sequence",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--recompute-granularity",
        default=None,
        choices=["full", "selective"],
        help="recompute activations in the backward pass: whole layers (full) or attention only (selective)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--recompute-method",
        default=None,
        choices=["uniform", "block"],
        help="full recomputation: checkpoint groups of --recompute-num-layers layers (uniform) or the first that many "
        "layers of each stage (block)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--recompute-num-layers",
        type=int,
        default=None,
        help="layers per recomputation group (uniform) or recomputed layers per stage (block)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--use-distributed-optimizer",
        type=bool,
        default=False,
        help="shard the optimizer state over data-parallel ranks (ZeRO-1)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    add(
        "--megatron-config",
        nargs="+",
        default=None,
        help="KEY=VALUE overrides of any other megatron TransformerConfig field (e.g. attention_softmax_in_fp32=true)",
        group=GROUP,
        **ONLY_MEGATRON,
    )
    for key, help in HOOK_OPTIONS.items():
        add("--" + key.replace("_", "-"), default=None, help=help, group=GROUP)
    add("--megatron-model-provider", default=None, help=PROVIDER_HELP, group=GROUP)
    add(
        "--mtp-num-layers",
        type=int,
        default=None,
        help="build this many of the checkpoint's multi-token prediction layers (GLM-4.5+, DeepSeek-V3) after the "
        "decoder: loaded, saved and converted with the model, outside the policy's log-probs; frozen unless "
        "--enable-mtp-training",
        group=GROUP,
    )
    add(
        "--enable-mtp-training",
        type=bool,
        default=False,
        help="train the MTP layers of --mtp-num-layers: add their loss (next tokens of the responses) to the training "
        "loss",
        group=GROUP,
    )
    add(
        "--mtp-loss-scaling-factor",
        type=float,
        default=0.2,
        help="weight of the MTP loss (averaged over the MTP layers) in the training loss",
        group=GROUP,
        acts_when=lambda config: config.get("enable_mtp_training"),
        no_effect="it weights the MTP loss, which --enable-mtp-training adds (slime-megatron)",
    )


@hookimpl
def slime_resolve_config(config: Config):
    pick_megatron_when_its_options_are_given(config)


@hookimpl
def slime_ranks_per_replica(config: Config):
    """A replica is tensor × pipeline × context-parallel ranks (expert parallelism splits the
    experts across data-parallel ranks, which keep their own samples)."""
    if config.get("train_backend") != "megatron":
        return None
    from slime_megatron.layout import Layout

    layout = Layout.of(config)
    return layout.tp * layout.pp * layout.cp


@hookimpl
def slime_validate_config(config: Config):
    return validate(config)


@hookimpl
def slime_register_checkpoint_readers(register):
    register("megatron", "slime_megatron.convert.run:write_hf")


@hookimpl
def slime_register_train_backends(register):
    register("megatron", "slime_megatron.rank:MegatronTrainRank")


@hookimpl
def slime_add_commands(subparsers):
    from slime_megatron.convert.command import add_convert_command

    add_convert_command(subparsers)
