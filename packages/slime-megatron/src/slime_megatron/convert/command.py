"""``slime convert hf-to-megatron`` / ``slime convert megatron-to-hf``: the command line.

Imports nothing heavy: the conversion (``slime_megatron.convert.run``) is imported when a
subcommand runs.
"""

from __future__ import annotations


def add_convert_command(subparsers) -> None:
    convert = subparsers.add_parser("convert", help="convert weights between Hugging Face and Megatron checkpoints")
    sub = convert.add_subparsers(title="directions", metavar="DIRECTION")
    convert.set_defaults(func=lambda args: (convert.print_help(), 2)[1])

    to_megatron = sub.add_parser(
        "hf-to-megatron", help="a Hugging Face model directory to a Megatron checkpoint (--load it)"
    )
    to_megatron.add_argument(
        "--hf", required=True, metavar="DIR", help="Hugging Face model directory (config.json, *.safetensors)"
    )
    to_megatron.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="checkpoint directory to write (iter_0000000 and the latest pointer)",
    )
    to_megatron.add_argument(
        "--tensor-model-parallel-size",
        type=int,
        default=1,
        metavar="N",
        help="tensor-parallel ranks to shard over (the checkpoint loads into any layout)",
    )
    to_megatron.add_argument(
        "--expert-model-parallel-size",
        type=int,
        default=1,
        metavar="N",
        help="expert-parallel ranks to shard a MoE's experts over",
    )
    to_megatron.set_defaults(func=_run("hf_to_megatron"))

    to_hf = sub.add_parser("megatron-to-hf", help="a Megatron checkpoint to a Hugging Face model directory")
    to_hf.add_argument(
        "--load",
        required=True,
        metavar="DIR",
        help="checkpoint directory (its latest checkpoint) or one iter_XXXXXXX directory",
    )
    to_hf.add_argument(
        "--hf-config",
        required=True,
        metavar="DIR",
        help="Hugging Face directory of the model's config and tokenizer (copied to --out)",
    )
    to_hf.add_argument("--out", required=True, metavar="DIR", help="Hugging Face model directory to write")
    to_hf.set_defaults(func=_run("megatron_to_hf"))


def _run(name: str):
    def run(args) -> int:
        from slime_megatron.convert import run as conversions

        return getattr(conversions, name)(args)

    return run
