"""Run configs for tests, resolved the way ``slime run`` resolves them."""

from __future__ import annotations


def make_config(data_path: str, hf_checkpoint: str, **overrides):
    """A resolved `Config` from every installed plugin's options, as ``slime run`` builds it,
    with ``overrides`` given by key (``lr=1e-3``). Validation applies (the batch constraint
    fills in derived sizes)."""
    from slime_core.config import OptionSet, load_config
    from slime_core.plugins import Plugins

    plugins = Plugins()
    options = OptionSet()
    plugins.add_options(options)
    argv = ["--prompt-data", str(data_path), "--hf-checkpoint", str(hf_checkpoint)]
    for key, value in overrides.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif value is not None:
            argv += [flag, *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    return load_config(argv, options, plugins)
