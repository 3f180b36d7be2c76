"""``slime engine serve``: run the CPU engine until interrupted."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def add_engine_command(subparsers) -> None:
    engine = subparsers.add_parser("engine", help="inference engines (slime engine serve ...)")
    commands = engine.add_subparsers(title="engine commands", metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a Hugging Face model on CPU with SGLang's native HTTP API",
        description="Serve a causal LM from a Hugging Face directory with SGLang's native API "
        "(/generate, /abort_request, /update_weights_from_tensor, ...), with continuous batching on CPU.",
    )
    serve.add_argument("--model", required=True, help="Hugging Face model directory (config, safetensors, tokenizer)")
    serve.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on every route but /health, as SGLang's --api-key "
        "(a command line is readable by every local user: SLIME_API_KEY in the environment is not; "
        "slime passes its run's token that way when the run spans nodes)",
    )
    serve.add_argument(
        "--admin-api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on the control endpoints (weight updates, pause, "
        "abort, flush, memory release), as SGLang's --admin-api-key (or SLIME_ADMIN_API_KEY in the "
        "environment, as slime passes its run's token)",
    )
    serve.add_argument(
        "--max-running-requests",
        type=_positive,
        default=256,
        help="requests decoded together, at most (default 256, a rollout batch of 32 prompts x 8)",
    )
    serve.add_argument(
        "--context-length",
        type=_positive,
        default=None,
        help="prompt + output tokens per request (default: the model's max_position_embeddings)",
    )
    serve.add_argument(
        "--num-threads",
        type=_positive,
        default=None,
        help="threads of torch's CPU kernels (default: torch's choice, one per core); "
        "use fewer when several engines or a trainer share the cores",
    )
    serve.add_argument(
        "--enable-deterministic-inference",
        action="store_true",
        help="as SGLang's flag: batch-invariant results; here, each request's output log-probs come from a "
        "forward pass of its sequence alone, whatever was decoded with it (slime's --true-on-policy-mode)",
    )
    serve.set_defaults(func=run_serve)


def run_serve(args) -> int:
    keys = _keys(args)
    engine = _load(args)
    if engine is None:
        return 2
    from aiohttp import web

    from slime_sglang.cpu_engine.server import create_app

    def announce(_aiohttp_banner: str) -> None:  # called once the port is bound; says the limits it runs with
        print(
            f"slime engine: serving {args.model} on http://{args.host}:{args.port} "
            f"(max_running_requests {args.max_running_requests}, context_length {args.context_length})",
            file=sys.stderr,
            flush=True,
        )

    try:
        web.run_app(
            create_app(engine, *keys),
            host=args.host,
            port=args.port,
            print=announce,
            access_log=None,
            handler_cancellation=True,
        )
    except OSError as exc:
        print(
            f"slime engine serve: cannot listen on {args.host}:{args.port} ({exc.strerror}); pick a free --port",
            file=sys.stderr,
        )
        return 1
    _exit_now()


def _keys(args) -> tuple[str | None, str | None]:
    """``(api_key, admin_api_key)``: the flags', else those the environment hands in
    (`slime_core.cluster.network.take_keys`, which also keeps them from the engine's own children)."""
    from slime_core.cluster.network import take_keys

    api_key, admin_key = take_keys()
    return args.api_key or api_key, args.admin_api_key or admin_key


def _exit_now() -> None:
    """Leave without the interpreter's teardown: the server holds nothing to flush but its
    output, and tearing down torch's and transformers' modules took 0.9 s of every stop, on the
    way out of each run (its engines stop one after another)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _load(args):
    """The engine for ``--model`` (None, with the reason printed, when it cannot be served)."""
    if not (Path(args.model) / "config.json").is_file():
        print(
            f"slime engine serve: {args.model} has no config.json; give a Hugging Face model directory "
            "(save_pretrained output) with --model",
            file=sys.stderr,
        )
        return None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch
    from transformers.utils import logging as transformers_logging

    from slime_sglang.cpu_engine.engine import load_engine

    transformers_logging.disable_progress_bar()
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    try:
        return load_engine(
            args.model, args.max_running_requests, args.context_length, args.enable_deterministic_inference
        )
    except (OSError, ValueError) as exc:  # transformers' errors for unreadable or unsupported models
        print(f"slime engine serve: cannot serve {args.model}: {exc}", file=sys.stderr)
        return None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
