"""slime-rewards' plugin module, found through the ``slime`` entry-point group.

Registers the reward functions (``--rm-type``), the group filters for dynamic sampling,
the sample filters, their options, and ``slime reward score``. Implementations are named
by ``"module:attribute"`` strings, so importing this module (as ``slime --help`` does)
imports neither sympy nor the graders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_core import hookimpl

if TYPE_CHECKING:
    from slime_core.config.config import Config

GROUP = "rewards (slime-rewards)"


@hookimpl
def slime_add_options(options):
    options.add("--rm-url", help="URL the remote reward POSTs each sample to", group=GROUP)
    options.add(
        "--rm-request-timeout",
        type=float,
        default=10.0,
        help="seconds one remote reward request may take (each retry gets as long; keep retries x this under "
        "--rm-timeout)",
        group=GROUP,
    )
    options.add("--rm-max-retries", type=int, default=3, help="retries of a failed remote reward call", group=GROUP)
    options.add(
        "--rm-retry-backoff",
        type=float,
        default=0.5,
        help="seconds before the first remote retry (doubles each time)",
        group=GROUP,
    )
    options.add("--math-timeout", type=float, default=5.0, help="seconds per symbolic math comparison", group=GROUP)
    options.add("--code-timeout", type=float, default=5.0, help="seconds per code test case", group=GROUP)
    options.add("--code-memory-mb", type=int, default=512, help="memory limit of the code sandbox", group=GROUP)
    options.add(
        "--code-sample-timeout",
        type=float,
        default=20.0,
        help="seconds all code tests of one sample may take together; a sample past it scores 0 (keep it below "
        "--rm-timeout)",
        group=GROUP,
    )
    options.add(
        "--code-isolation",
        default="namespaces",
        choices=["namespaces", "hooks"],
        help="code sandbox: its own user, root directory and namespaces (needs root), or audit hooks and limits only "
        "(trusted code)",
        group=GROUP,
    )
    options.add(
        "--sample-filter-max-tokens",
        type=int,
        default=None,
        help="drop_over_length: most tokens a sample may have",
        group=GROUP,
    )


#: ``--rm-type`` names of ``slime_rewards.functions.REWARD_FUNCTIONS`` (listed here so that
#: registering them imports nothing); each also gets a ``boxed_<name>`` variant that grades
#: only the last ``\\boxed{}`` span of the response.
REWARD_NAMES = ("exact_match", "math", "dapo", "deepscaler", "f1", "gpqa", "multiple_choice", "code", "remote")
#: reward name -> its label check in ``slime_rewards.labels`` (what labels it grades, checked on
#: every record before a run starts); ``remote`` passes the label on untouched and declares none
LABEL_CHECKS = {
    "exact_match": "exact_text",
    "math": "answer",
    "dapo": "answer",
    "deepscaler": "answer",
    "f1": "reference",
    "gpqa": "choice",
    "multiple_choice": "choice",
    "code": "code_tests",
}


@hookimpl
def slime_register_reward_functions(register):
    for name in REWARD_NAMES:
        label = f"slime_rewards.labels:{LABEL_CHECKS[name]}" if name in LABEL_CHECKS else None
        register(name, f"slime_rewards.functions:REWARDS.{name}", label=label)
        register(f"boxed_{name}", f"slime_rewards.functions:BOXED.{name}", label=label)


@hookimpl
def slime_validate_config(config: Config):
    if (config.get("rm_type") or "").removeprefix("boxed_") != "code":
        return []
    from slime_rewards.code_isolation import SandboxError, check_namespaces

    errors = []
    sample_timeout, rm_timeout = config.get("code_sample_timeout"), config.get("rm_timeout")
    if sample_timeout and rm_timeout and sample_timeout >= rm_timeout:
        errors.append(
            f"--code-sample-timeout ({sample_timeout}s) must be below --rm-timeout ({rm_timeout}s), or a "
            "sample whose code runs too long is dropped instead of scoring 0; lower the one or raise the other"
        )
    if config.get("code_isolation", "namespaces") == "namespaces":
        try:
            check_namespaces()
        except SandboxError as error:
            errors.append(str(error))
    return errors


@hookimpl
def slime_register_group_filters(register):
    register("nonzero_std", "slime_rewards.group_filters:nonzero_std")
    register("nonzero_std_unless_scarce", "slime_rewards.group_filters:nonzero_std_unless_scarce")


@hookimpl
def slime_register_sample_filters(register):
    register("drop_truncated", "slime_rewards.sample_filters:drop_truncated")
    register("drop_over_length", "slime_rewards.sample_filters:drop_over_length")


@hookimpl
def slime_add_commands(subparsers):
    from slime_rewards.score_command import add_score_command

    add_score_command(subparsers)
