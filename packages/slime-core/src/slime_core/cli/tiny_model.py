"""``slime tiny-model DIR [--family NAME]``: a small random model (Qwen3 by default) with a
character tokenizer, for trying slime on a laptop CPU and for tests (nothing is downloaded)."""

from __future__ import annotations


def add_tiny_model_command(subparsers) -> None:
    parser = subparsers.add_parser(
        "tiny-model",
        help="write a small random model (Qwen3 by default) and its character tokenizer to a directory",
        description="Write a randomly initialised causal LM (one token per character) as a Hugging Face "
        "directory. The defaults (a 0.8 M-parameter Qwen3) learn two-digit addition with RL on a CPU; --family "
        "picks another architecture (MoE, MLA and linear-attention families at the same size).",
    )
    parser.add_argument("directory", help="where to write it (created)")
    parser.add_argument(
        "--family", default="qwen3", choices=list(_families()), help="model family (transformers model_type)"
    )
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--max-positions", type=int, default=64, help="longest prompt + response in tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=_write)


def _families():
    from slime_core.tools.tiny_models import TINY_FAMILIES

    return TINY_FAMILIES


def _write(args) -> int:
    from slime_core.tools.tiny_models import build_tiny_model

    path = build_tiny_model(
        args.directory,
        args.family,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        seed=args.seed,
        max_positions=args.max_positions,
    )
    print(f"wrote a tiny {args.family} model to {path}")
    return 0
