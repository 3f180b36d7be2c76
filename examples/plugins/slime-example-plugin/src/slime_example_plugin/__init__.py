"""An example slime plugin: an option, a reward function and a group filter.

slime loads this module through the ``slime`` entry point in pyproject.toml; every
``@hookimpl`` function below implements a hook from ``slime_core.hookspecs``.
"""

from slime_core import hookimpl


@hookimpl
def slime_add_options(options):
    options.add(
        "--keyword-length-bonus", type=float, default=0.0, help="bonus per character below 10", group="example plugin"
    )
    options.add(
        "--min-reward-spread",
        type=float,
        default=0.5,
        help="smallest reward spread a group needs",
        group="example plugin",
    )


@hookimpl
def slime_register_reward_functions(register):
    register("keyword", keyword_reward)


@hookimpl
def slime_register_group_filters(register):
    register("reward_spread", reward_spread_filter)


def keyword_reward(sample, config):
    """1.0 if the response contains the sample's keyword, plus a small bonus for brevity."""
    hit = sample.metadata.get("keyword", "").lower() in sample.response.lower()
    bonus = getattr(config, "keyword_length_bonus", 0.0) * max(0, 10 - len(sample.response))
    return float(hit) + bonus if hit else 0.0


def reward_spread_filter(group, config, progress):
    """Keep a group only if its rewards are spread enough to give a learning signal."""
    rewards = [sample.reward for sample in group]
    return max(rewards) - min(rewards) >= getattr(config, "min_reward_spread", 0.5)
