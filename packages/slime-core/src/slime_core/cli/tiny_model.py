"""``slime tiny-model DIR [--family NAME]``: a small random model (Qwen3 by default) with a
character tokenizer, for trying slime on a laptop CPU and for tests (nothing is downloaded)."""

from __future__ import annotations

import argparse


def add_tiny_model_command(subparsers) -> None:
    parser = subparsers.add_parser(
        "tiny-model",
        help="write a small random model (Qwen3 by default) and its character tokenizer to a directory",
        description="Write a randomly initialised causal LM (one token per character) as a Hugging Face "
        "directory. The defaults (a 0.8 M-parameter Qwen3) learn two-digit addition with RL on a CPU; --family "
        "picks another architecture (MoE, MLA and linear-attention families at the same size). Each family "
        "keeps every structural option of the released checkpoint named below (biases, tied or untied "
        "embeddings, norms, rotary scaling, attention kind, MoE routing, dense layers), scaled down in sizes "
        "only; a variant is another released shape of the same model_type. The vision-language families "
        "also write their processor (images as 4-pixel patches, 2 x 2 merged per token).",
        epilog=_families_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", help="where to write it (created)")
    parser.add_argument(
        "--family",
        default="qwen3",
        choices=[*_shapes(), *_vlm_shapes()],
        metavar="NAME",
        help="model family (transformers model_type) or variant, listed below (default: qwen3)",
    )
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument(
        "--max-positions",
        type=int,
        default=None,
        help="longest prompt + response in tokens (default: 64; 256 for the vision-language families)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mtp-layers",
        type=int,
        default=None,
        help="multi-token prediction layers to append (GLM-4.5 and DeepSeek-V3; default: as many as the "
        "released checkpoint holds, 1; 0 writes none)",
    )
    parser.set_defaults(func=_write)


def _shapes():
    from slime_core.tools.tiny_models import TINY_SHAPES

    return TINY_SHAPES


def _vlm_shapes():
    from slime_core.tools.tiny_vlms import TINY_VLM_FAMILIES

    return TINY_VLM_FAMILIES


def _families_epilog() -> str:
    """One line per --family name: its model_type and the released config.json it follows."""
    lines = ["families and variants (the released checkpoint whose config.json each follows):"]
    for name, shape in _shapes().items():
        kind = "" if name == shape.model_type else f" (model_type {shape.model_type})"
        mtp = f", {shape.mtp_layers} MTP layer" if shape.mtp_layers else ""
        lines.append(f"  {name:<14} {shape.released}{kind}{mtp}")
    lines.append("vision-language families (the model, its tokenizer and its processor):")
    lines += [f"  {name:<14} {shape.released}" for name, shape in _vlm_shapes().items()]
    return "\n".join(lines)


def _write(args) -> int:
    from slime_core.tools.tiny_models import TINY_SHAPES, build_tiny_model

    if args.family in _vlm_shapes():
        return _write_vlm(args)

    mtp_layers = TINY_SHAPES[args.family].mtp_layers if args.mtp_layers is None else args.mtp_layers
    path = build_tiny_model(
        args.directory,
        args.family,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        seed=args.seed,
        max_positions=args.max_positions or 64,
        mtp_layers=mtp_layers,
    )
    print(f"wrote a tiny {args.family} model to {path}")
    return 0


def _write_vlm(args) -> int:
    from slime_core.tools.tiny_vlms import build_tiny_vlm

    if args.mtp_layers:
        raise SystemExit(f"--mtp-layers: {args.family} checkpoints have no MTP layers")
    path = build_tiny_vlm(
        args.directory,
        args.family,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        seed=args.seed,
        max_positions=args.max_positions or 256,
    )
    print(f"wrote a tiny {args.family} vision-language model (with its processor) to {path}")
    return 0
