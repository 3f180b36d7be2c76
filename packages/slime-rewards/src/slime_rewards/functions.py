"""The built-in reward functions, in the reward hub's signature ``fn(sample, config)``.

``sample`` is a `slime_core.Sample`; ``config`` has attribute access to options and may be
None (each option then takes its documented default). A malformed *response* (no answer,
unparsable, code that crashes) is a low reward, never an exception; exceptions mean a real
fault (a sample without a label, the reward server down after retries, a sandbox that
could not start).

Options read: ``math_timeout`` (s per comparison, 5), ``code_timeout`` (s per test, 5),
``code_memory_mb`` (512), ``code_sample_timeout`` (s for all tests of a sample, 20),
``code_isolation`` (namespaces), ``rm_url``, ``rm_request_timeout`` (s per attempt, 10), ``rm_max_retries`` (3),
``rm_retry_backoff`` (s before the first retry, doubling; 0.5).

Graders are imported when first called, so importing this module (to list the names)
does not import sympy or httpx.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

from slime_rewards.boxed import boxed

if TYPE_CHECKING:
    from slime_core.config.config import Config

_DEFAULTS = {
    "math_timeout": 5.0,
    "code_timeout": 5.0,
    "code_memory_mb": 512,
    "code_sample_timeout": 20.0,
    "code_isolation": "namespaces",
    "rm_url": None,
    "rm_request_timeout": 10.0,
    "rm_max_retries": 3,
    "rm_retry_backoff": 0.5,
}


def option(config: Config, name: str):
    """`config.name`, or the documented default when config is None or lacks it."""
    value = getattr(config, name, None) if config is not None else None
    return _DEFAULTS[name] if value is None else value


def math_reward(sample, config: Config | None = None) -> float:
    """1.0 if the final answer is mathematically equivalent to the label, else 0.0."""
    from slime_rewards.math.grader import grade_math

    return 1.0 if grade_math(sample.response, sample.label, float(option(config, "math_timeout"))) else 0.0


def dapo_reward(sample, config: Config | None = None) -> dict:
    """DAPO/Minerva string match on the last ``Answer:`` line: ``{"score": ±1, "acc", "pred"}``."""
    from slime_rewards.dapo import dapo_score

    return dapo_score(sample.response, sample.label)


def deepscaler_reward(sample, config: Config | None = None) -> float:
    """The math reward on the text after ``</think>``; 0.0 without ``</think>``."""
    from slime_rewards.deepscaler import deepscaler_score

    return deepscaler_score(sample.response, sample.label, float(option(config, "math_timeout")))


def f1_reward(sample, config: Config | None = None) -> float:
    """SQuAD token F1 against the label (a string or a list of strings: the best)."""
    from slime_rewards.f1 import f1_score

    return f1_score(sample.response, sample.label)


def multiple_choice_reward(sample, config: Config | None = None) -> float:
    """1.0 if the picked option letter is the labelled one (GPQA-style), else 0.0."""
    from slime_rewards.multiple_choice import multiple_choice_score

    return multiple_choice_score(sample.response, sample.label, sample.metadata)


def code_reward(sample, config: Config | None = None) -> float:
    """Share of the test cases (``metadata["tests"]``, else the label) the response's code
    passes; 0 past ``--code-sample-timeout``. Why is in ``metadata["code_reward"]``."""
    from slime_rewards.code_sandbox import Limits, extract_code, grade, parse_tests

    if sample.metadata is None:
        sample.metadata = {}
    metadata = sample.metadata
    tests = parse_tests(metadata["tests"] if "tests" in metadata else sample.label)
    code = extract_code(sample.response)
    if code is None:
        metadata["code_reward"] = "scored 0: no code in the response"
        return 0.0
    limits = Limits(
        timeout_s=float(option(config, "code_timeout")),
        memory_mb=int(option(config, "code_memory_mb")),
        sample_timeout_s=float(option(config, "code_sample_timeout")),
        isolation=option(config, "code_isolation"),
    )
    result = grade(code, tests, limits)
    metadata["code_reward"] = result.reason
    return result.score


async def remote_reward(sample, config: Config | None = None) -> float:
    """The reward returned by the reward-model server at ``rm_url``."""
    from slime_rewards.remote import remote_score

    url = option(config, "rm_url")
    if not url:
        raise ValueError("the remote reward needs the server's URL: pass --rm-url http://HOST:PORT/PATH")
    payload = {"response": sample.response, "label": sample.label, "metadata": sample.metadata, "prompt": sample.prompt}
    return await remote_score(
        url,
        payload,
        timeout=float(option(config, "rm_request_timeout")),
        max_retries=int(option(config, "rm_max_retries")),
        backoff=float(option(config, "rm_retry_backoff")),
    )


def exact_match_reward(sample, config: Config | None = None) -> float:
    """1.0 if the response, stripped of surrounding whitespace, is the label's text exactly
    (short answers such as ``49``; no answer extraction, no normalisation), else 0.0."""
    return 1.0 if sample.label is not None and sample.response.strip() == str(sample.label).strip() else 0.0


REWARD_FUNCTIONS = {
    "exact_match": exact_match_reward,
    "math": math_reward,
    "dapo": dapo_reward,
    "deepscaler": deepscaler_reward,
    "f1": f1_reward,
    "gpqa": multiple_choice_reward,
    "multiple_choice": multiple_choice_reward,
    "code": code_reward,
    "remote": remote_reward,
}


def boxed_reward(inner_name):
    """The ``boxed_<inner_name>`` reward: `inner_name`'s grader on the last boxed span only.

    `inner_name` is a name in `REWARD_FUNCTIONS`, or any reward function (a plugin's own).
    """
    if callable(inner_name):
        return boxed(inner_name, getattr(inner_name, "__name__", "custom"))
    if inner_name not in REWARD_FUNCTIONS:
        known = ", ".join(sorted(REWARD_FUNCTIONS))
        raise ValueError(f"boxed_reward: unknown reward {inner_name!r}; known rewards are {known}")
    return boxed(REWARD_FUNCTIONS[inner_name], inner_name)


#: Attribute access to the rewards by name, for the plugin's ``"module:REWARDS.name"`` references.
REWARDS = SimpleNamespace(**REWARD_FUNCTIONS)
#: ``BOXED.name`` is the ``boxed_<name>`` reward.
BOXED = SimpleNamespace(**{name: boxed_reward(name) for name in REWARD_FUNCTIONS})
