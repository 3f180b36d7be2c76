"""The dapo, deepscaler and boxed_<type> rewards, called as the reward hub calls them."""

import asyncio

import pytest

from slime_core import Sample
from slime_core.config import Config
from slime_core.plugins import Plugins
from slime_rewards.boxed import boxed

INVALID = {"score": -1.0, "acc": False, "pred": "[INVALID]"}


@pytest.fixture(scope="module")
def rewards():
    return Plugins().registry("reward_functions")


def score(rewards, name, response, label, config=None, metadata=None):
    sample = Sample(response=response, label=label, metadata=metadata or {})
    return rewards.get(name)(sample, config)


def test_math_family_names_are_registered(rewards):
    for name in ("math", "dapo", "deepscaler"):
        assert name in rewards and f"boxed_{name}" in rewards


# ---- dapo: Minerva normalisation, then an exact string match, +1 / -1


@pytest.mark.parametrize(
    "response, label, pred",
    [
        ("Adding up the parts.\nAnswer: 42", "42", "42"),
        ("answer: 42", 42, "42"),
        ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}", "\\frac{1}{2}"),
        ("Answer: \\frac12", "\\frac{1}{2}", "\\frac{1}{2}"),
        ("Answer: $\\dfrac{1}{2}$", "\\dfrac{1}{2}", "\\dfrac{1}{2}"),
        ("Answer: 1,000", "1000", "1000"),
        ("Answer: 5 dollars", "5", "5"),
        ("Answer: 30^\\circ", "30", "30"),
        ("Answer: $x = 5$", "5", "5"),
        ("Answer: \\boxed{\\text{Paris}}", "Paris", "Paris"),
        ("Answer: $5$ (not $6$, which fails the check)", "5", "5"),
        ("Answer: 3\nWait, that was wrong.\nAnswer: 4", "4", "4"),
        ("Answer: 7", ["6", "7"], "7"),
    ],
)
def test_dapo_matches_the_normalised_answer_line(rewards, response, label, pred):
    assert score(rewards, "dapo", response, label) == {"score": 1.0, "acc": True, "pred": pred}


@pytest.mark.parametrize(
    "response, label, pred",
    [
        ("Answer: -3", "3", "-3"),
        ("Answer: 0.5", "5", "0.5"),
        ("Answer: 0.5", "\\frac{1}{2}", "0.5"),  # no equivalence check: DAPO compares strings
        ("Answer: 1,2", "12", "1,2"),
        ("Answer: 3\nWait, that was wrong.\nAnswer: 4", "3", "4"),
    ],
)
def test_dapo_wrong_answers_score_minus_one(rewards, response, label, pred):
    assert score(rewards, "dapo", response, label) == {"score": -1.0, "acc": False, "pred": pred}


@pytest.mark.parametrize("response", ["The answer is $\\boxed{42}$.", "", "I give up."])
def test_dapo_without_an_answer_line_is_invalid(rewards, response):
    assert score(rewards, "dapo", response, "42") == INVALID


# ---- deepscaler: only the text after the reasoning counts


@pytest.mark.parametrize(
    "response, label, reward",
    [
        ("<think>2 + 40 = 42</think>\nThe answer is $\\boxed{42}$.", "42", 1.0),
        ("<think>2 + 40 = 42</think>\nThe answer is 42.", "42", 1.0),
        ("<think>hmm</think>draft<think>redo</think>So the answer is $\\boxed{\\frac{1}{2}}$.", "0.5", 1.0),
        ("<think>2 + 40 = 42</think>\nThe answer is $\\boxed{-42}$.", "42", 0.0),
        ("<think>so it is \\boxed{42}</think>\nI could not decide.", "42", 0.0),
        ("<think>2 + 40 = 42, so \\boxed{42}", "42", 0.0),  # never finished thinking
        ("The answer is $\\boxed{42}$.", "42", 0.0),
        ("<think>...</think>The answer is $\\boxed{4", "4", 0.0),
    ],
)
def test_deepscaler_grades_only_after_think(rewards, response, label, reward):
    assert score(rewards, "deepscaler", response, label) == reward
    assert score(rewards, "deepscaler", response, label, Config({"math_timeout": 2.0})) == reward


# ---- boxed_<type>: the last complete box is the whole answer


@pytest.mark.parametrize(
    "response, label, reward",
    [
        ("So it is $\\boxed{\\frac{1}{2}}$.", "0.5", 1.0),
        ("First $\\boxed{3}$, then the final answer $\\boxed{4}$.", "4", 1.0),
        ("First $\\boxed{4}$, then the final answer $\\boxed{3}$.", "4", 0.0),
        ("The answer is 42.", "42", 0.0),  # math would accept the phrase; boxed_math needs a box
        ("The answer is 42, not $\\boxed{41}$.", "42", 0.0),
        ("So $\\boxed{4}$. Checking again, the answer is $\\boxed{\\frac{1", "4", 0.0),
        ("So $\\boxed{\\{1, 2\\}}$.", "\\{2, 1\\}", 1.0),
    ],
)
def test_boxed_math(rewards, response, label, reward):
    assert score(rewards, "boxed_math", response, label) == reward


def test_boxed_math_differs_from_math_only_in_extraction(rewards):
    assert score(rewards, "math", "The answer is 42.", "42") == 1.0
    assert score(rewards, "boxed_math", "The answer is 42.", "42") == 0.0


@pytest.mark.parametrize(
    "response, label, expected",
    [
        ("So $\\boxed{42}$.", "42", {"score": 1.0, "acc": True, "pred": "42"}),
        ("Answer: 42 but boxed $\\boxed{41}$.", "42", {"score": -1.0, "acc": False, "pred": "41"}),
        ("Answer: 42", "42", INVALID),
        (
            "$\\boxed{\\begin{pmatrix} 1 \\\\\n 2 \\end{pmatrix}}$",
            "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
            {"score": 1.0, "acc": True, "pred": "\\begin{pmatrix}1\\\\2\\end{pmatrix}"},
        ),
    ],
)
def test_boxed_dapo(rewards, response, label, expected):
    assert score(rewards, "boxed_dapo", response, label) == expected


@pytest.mark.parametrize(
    "response, reward",
    [
        ("So $\\boxed{42}$.", 1.0),
        ("<think>\\boxed{42}</think>", 1.0),
        ("<think>x</think>So 42.", 0.0),
        ("\\boxed{4", 0.0),
    ],
)
def test_boxed_deepscaler_needs_no_think_tag(rewards, response, reward):
    assert score(rewards, "boxed_deepscaler", response, "42") == reward


def test_boxed_leaves_the_sample_alone(rewards):
    sample = Sample(response="Thus $\\boxed{7}$.", label="7", metadata={"id": 3})
    assert rewards.get("boxed_math")(sample, None) == 1.0
    assert sample.response == "Thus $\\boxed{7}$."


def test_boxed_wraps_async_rewards():
    seen = []

    async def echo(sample, config=None):
        seen.append(sample.response)
        return 1.0

    reward = boxed(echo, "echo")
    assert reward.__name__ == "boxed_echo"
    assert asyncio.run(reward(Sample(response="so \\boxed{x + 1}."), None)) == 1.0
    assert asyncio.run(reward(Sample(response="no box"), None)) == 0.0
    assert seen == ["x + 1"]
