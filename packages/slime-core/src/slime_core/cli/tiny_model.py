"""``slime tiny-model DIR``: a small random Qwen3 model with a character tokenizer, for
trying slime on a laptop CPU and for tests (nothing is downloaded)."""

from __future__ import annotations


def add_tiny_model_command(subparsers) -> None:
    parser = subparsers.add_parser(
        "tiny-model", help="write a small random Qwen3 model and its character tokenizer to a directory",
        description="Write a randomly initialised Qwen3-architecture causal LM (one token per character) as a "
        "Hugging Face directory. The defaults (0.8 M parameters) learn two-digit addition with RL on a CPU.")
    parser.add_argument("directory", help="where to write it (created)")
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--max-positions", type=int, default=64, help="longest prompt + response in tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=_write)


def _write(args) -> int:
    from slime_core.tiny_models import build_tiny_qwen3

    path = build_tiny_qwen3(args.directory, hidden_size=args.hidden_size, num_layers=args.num_layers,
                            seed=args.seed, max_positions=args.max_positions)
    print(f"wrote a tiny Qwen3 model to {path}")
    return 0
