"""Options hooks: a package adds its options and subcommands and resolves and checks the config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core.hookspecs.marker import hookspec

if TYPE_CHECKING:
    from slime_core.config import Config


@hookspec
def slime_add_options(options):
    """Add this plugin's options to ``slime run`` (command line and YAML config).

    Called once when the option set is built, before any config is read.

    :param options: a ``slime_core.config.options.OptionSet``; call
        ``options.add("--flag-name", type=int, default=..., help=..., group=...)``. An option
        that acts only in some configurations says when, with the reason otherwise
        (``acts_when=lambda config: config.train_backend == "fsdp", no_effect="it ..."``):
        ``slime run`` warns a user who sets it where it does nothing.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_resolve_config(config: Config):
    """Fill in what follows from the options the user gave, before any check runs (e.g. pick
    this plugin's backend when only its options are given).

    Called after the config is merged and type-checked and slime's aliases are applied, before
    slime's own resolution (`slime_core.config.resolve`), slime's checks and any
    ``slime_validate_config``, so every check sees the final values. Set options here: the
    config is frozen once checked, and an assignment after that raises (`FrozenConfigError`).
    Set an option with ``setattr(config, key, value)`` and say why in
    ``config.sources[key]`` (``--dry-run`` shows it); report problems from
    ``slime_validate_config``, not here.

    :param config: the ``slime_core.config.Config`` being resolved.
    :return: nothing.

    Runs in the driver.
    """


@hookspec
def slime_validate_config(config: Config, plugins):
    """Check a resolved config for problems only this plugin understands.

    Called after the config is merged and type-checked, before anything starts. Errors
    from every plugin are collected and reported together.

    :param config: the resolved ``slime_core.config.Config``.
    :param plugins: the run's ``slime_core.plugins.Plugins`` (its registries, e.g. for
        ``slime_core.components.run_generates``); take it only where needed.
    :return: a list of error strings (what is wrong and how to fix it), or None.

    Runs in the driver.
    """


@hookspec(firstresult=True)
def slime_ranks_per_replica(config: Config):
    """How many training ranks form one model replica in ``config`` (they train on the same
    samples: a Megatron replica's tensor-, pipeline- and context-parallel ranks), for the
    config check that every replica gets whole prompt groups (`slime_core.rollout_batch`).

    Called when the config is checked, after ``slime_validate_config``'s plugins resolved it.

    :param config: the resolved ``slime_core.config.Config``.
    :return: an int, or None when ``config.train_backend`` is not this plugin's (every rank is
        then its own replica). The first answer counts.

    Runs in the driver; at run time the ranks say the same through their ``init()`` answer
    (``"data_parallel_rank"``, `slime_core.train_backend.TrainGroup`).
    """


@hookspec
def slime_add_commands(subparsers):
    """Add subcommands to the ``slime`` command (e.g. ``slime reward score``).

    Called when the ``slime`` command line is built.

    :param subparsers: the ``argparse`` subparsers action of the ``slime`` parser; set
        ``func=`` with ``set_defaults`` to the callable that runs the command (it gets the
        parsed ``argparse.Namespace``, with ``plugin_modules`` (the ``-p`` modules) and
        ``extra`` (arguments argparse did not know, allowed only with
        ``set_defaults(allow_extra=True)``), and returns an exit code).
    :return: nothing.

    Runs in the process that runs the ``slime`` command.
    """
