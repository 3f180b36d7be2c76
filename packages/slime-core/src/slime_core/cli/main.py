"""``slime``: the command users live in.

``slime run`` reads its options dynamically (every installed plugin may add some), so it
is dispatched before argparse; the other subcommands, including those plugins add, are
ordinary argparse subcommands.
"""

from __future__ import annotations

import argparse
import os
import sys

from slime_core import __version__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    put_working_directory_on_path()
    modules, argv = extract_plugin_modules(argv)
    try:
        return _dispatch(argv, modules)
    except KeyboardInterrupt:
        print("slime: interrupted", file=sys.stderr)
        return 130


def put_working_directory_on_path() -> None:
    """Let ``-p module`` and ``--custom-*-path module.fn`` name modules in the folder the command
    runs in, as ``python train.py`` in slime and Ray's workers (which get the driver's working
    directory) do; a console script's path holds its own folder instead. Appended, not
    prepended: run inside a THUDM/slime checkout, its ``slime/`` folder must not shadow the
    installed ``slime`` of slime-compat."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def _dispatch(argv: list[str], modules: list[str]) -> int:
    from slime_core.plugins import PluginError, Plugins

    try:
        plugins = Plugins(modules)
    except PluginError as exc:
        print(f"slime: {exc}", file=sys.stderr)
        return 2
    if argv[:1] == ["run"]:
        from slime_core.cli.run import run_command

        return run_command(argv[1:], plugins)
    parser = build_parser(plugins)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "allow_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    args.extra, args.plugin_modules = extra, modules
    return args.func(args)


def extract_plugin_modules(argv: list[str]) -> tuple[list[str], list[str]]:
    """Remove every ``-p MODULE`` / ``-p=MODULE`` from argv (they load before options exist)."""
    modules, rest, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        if token == "-p" and i + 1 < len(argv):
            modules.append(argv[i + 1])
            i += 2
            continue
        if token.startswith("-p="):
            modules.append(token[3:])
        else:
            rest.append(token)
        i += 1
    return modules, rest


def build_parser(plugins) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slime", description="slime: RL post-training for LLMs at scale.")
    parser.add_argument("--version", action="version", version=f"slime {__version__}")
    parser.add_argument("-p", metavar="MODULE", action="append", help="load a local plugin module (repeatable)")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    sub.add_parser("run", help="run RL training from a YAML config and flags (slime run --help lists options)")
    plugins_parser = sub.add_parser("plugins", help="list installed plugins as JSON")
    plugins_parser.set_defaults(func=lambda args: _plugins_command(plugins))
    plugins.add_commands(sub)
    return parser


def _plugins_command(plugins) -> int:
    import json

    print(json.dumps(plugins.describe(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
