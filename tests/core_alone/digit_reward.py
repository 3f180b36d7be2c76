"""The reward of tests/test_core_alone.py's learning run on vLLM, given as ``--rm-type
digit_reward:digit_share`` with this folder on PYTHONPATH (as a user names a reward of their own).
A random tiny model starts near 0.1 and GRPO raises it within a few rollouts."""


def digit_share(sample, config) -> float:
    """The share of the response's characters that are digits."""
    return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)
