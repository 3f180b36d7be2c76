"""``slime run [CONFIG.yaml] [--flags]``: resolve the config, then run (or describe) the loop."""

from __future__ import annotations

import sys

from slime_core.components import resolve_components
from slime_core.config import ConfigError, OptionSet, load_config
from slime_core.plugins.custom_paths import apply_custom_paths


def run_command(argv: list[str], plugins) -> int:
    options = OptionSet()
    plugins.add_options(options)
    if "-h" in argv or "--help" in argv:
        options.help_parser("slime run").print_help()
        return 0
    try:
        config = load_config(argv, options, plugins)
    except ConfigError as exc:
        print(f"slime run: {exc}", file=sys.stderr)
        return 2
    apply_custom_paths(config, plugins)
    components, missing = resolve_components(config, plugins)
    if config.dry_run:
        print(describe_run(config, plugins, components, missing))
        return 0
    if missing:
        print(f"slime run: {ConfigError(missing)}", file=sys.stderr)
        return 2
    print(
        "slime run: the config is valid, but this version of slime has no training loop yet "
        "(it arrives with the loop's release); use --dry-run to inspect the run",
        file=sys.stderr,
    )
    return 2


def describe_run(config, plugins, components: list[dict], missing: list[str]) -> str:
    """The dry-run report: resolved config, loaded plugins, and the selected components."""
    lines = ["# resolved config", config.to_yaml().rstrip(), "", "# plugins"]
    lines += [f"- {info.name}: {info.label}" for info in plugins.info.values()]
    lines += ["", "# components (option: name -> provider)"]
    for row in components:
        provider = f"plugin '{row['plugin']}' ({row['distribution']})" if row["plugin"] else "NOT INSTALLED"
        lines.append(f"- {row['option']}: {row['name']} -> {provider}")
    if missing:
        lines += ["", "# a real run would stop here:"] + [f"- {error}" for error in missing]
    return "\n".join(lines)
