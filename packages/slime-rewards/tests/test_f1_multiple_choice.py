"""The `f1` reward (SQuAD token F1) and the `gpqa` / `multiple_choice` rewards (option letters),
called through the plugin registry the way the reward hub calls them."""

import pytest

from slime_core import Sample
from slime_core.plugins import Plugins


@pytest.fixture(scope="module")
def rewards():
    registry = Plugins().registry("reward_functions")
    return {name: registry.get(name) for name in ("f1", "gpqa", "multiple_choice", "boxed_f1", "boxed_multiple_choice")}


def graded(fn, response, label, **metadata):
    return fn(Sample(response=response, label=label, metadata=metadata), None)


# --- f1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "label", "f1"),
    [
        ("Denver Broncos", "Denver Broncos", 1.0),
        ("The Denver Broncos!", "denver broncos", 1.0),  # case, punctuation and articles ignored
        ("Broncos", "Denver Broncos", 2 / 3),  # precision 1, recall 1/2
        ("the Denver Broncos team", "Denver Broncos", 0.8),  # precision 2/3, recall 1
        ("Carolina Panthers", "Denver Broncos", 0.0),
        ("cat cat", "cat", 2 / 3),  # overlap counts each token once per occurrence
        ("don't stop", "dont stop", 1.0),
        ("The answer is Denver Broncos. They won in 2016.", "Denver Broncos", 1.0),
        ("Answer: Paris\nBecause it is the capital.", "Paris", 1.0),
        ("I think \\boxed{Santa Clara} is right", "Santa Clara", 1.0),
        ("\\boxed{Denver} and later \\boxed{Denver Broncos}", "Denver Broncos", 1.0),  # the last box
        ("Paris", ["London", "Paris", "Rome"], 1.0),  # the best reference
        ("New York City", ["New York", "York City"], 0.8),
        ("Paris", ["London", None], 0.0),
        ("", "Paris", 0.0),
        ("a an the", "", 1.0),  # both empty after normalising: an unanswerable question, answered so
        ("Paris", "", 0.0),
        ("42", 42, 1.0),  # a numeric label
        ("0", 0, 1.0),  # zero is an answer, not a missing label
        ("1947", {"text": ["1947", "in 1947"], "answer_start": [10, 7]}, 1.0),  # SQuAD answers dict
        ("<think>Surely the Denver Broncos?</think>Carolina Panthers", "Denver Broncos", 0.0),
        ("<think>Carolina? No.</think>The Denver Broncos.", "Denver Broncos", 1.0),
    ],
)
def test_f1(rewards, response, label, f1):
    assert graded(rewards["f1"], response, label) == pytest.approx(f1)


@pytest.mark.parametrize("label", [None, [], [None], {"answer_start": [3]}])
def test_f1_without_a_reference_is_an_error(rewards, label):
    with pytest.raises(ValueError, match="f1 needs a reference answer"):
        graded(rewards["f1"], "Paris", label)


def test_boxed_f1_grades_only_the_box(rewards):
    assert graded(rewards["boxed_f1"], "It is Paris. \\boxed{Paris}", "Paris") == 1.0
    assert graded(rewards["boxed_f1"], "The answer is Paris.", "Paris") == 0.0


# --- multiple choice ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "picked"),
    [
        # the usual ways to answer
        ("The answer is (B).", "B"),
        ("Answer: C", "C"),
        ("**Answer: C**", "C"),
        ("ANSWER: D", "D"),
        ("The correct answer is D.", "D"),
        ("Answer: option C", "C"),
        ("the correct choice is B", "B"),
        ("The answer is: B) 42", "B"),
        ("Answer:\n\nB", "B"),
        ("Final Answer: (A)", "A"),
        ("The answer is $B$", "B"),
        ("The answer is \\(B\\)", "B"),
        ("Answer: [C]", "C"),
        ("Answer: b", "B"),  # a lower-case letter that ends its line
        ("The answer is (a).", "A"),
        ("The answer is A because the others fail.", "A"),
        # boxed letters
        ("\\boxed{D}", "D"),
        ("So the answer is $\\boxed{C}$.", "C"),
        ("\\boxed{\\text{(D)}}", "D"),
        ("\\boxed{B. 42}", "B"),
        # a last line that is only a letter
        ("After all of that, I pick\n\nC", "C"),
        ("**C.**", "C"),
        ("(A)", "A"),
        # several answers: the last one counts
        ("The answer is B. Wait, actually the answer is C.", "C"),
        ("\\boxed{B} ... on reflection \\boxed{C}", "C"),
        ("Answer: A\nHmm, no.\nAnswer: D", "D"),
        ("<think>The answer is A.</think>The answer is B.", "B"),
        # look-alikes that are not an answer
        ("The answer is a function of x.", None),  # "a" the article
        ("The answer is A good deal more subtle.", None),  # "A" the article
        ("A good answer would need more data.", None),
        ("Answer: Because the field vanishes.", None),  # a letter inside a word
        ("Answer: apple", None),
        ("Answer: E", None),  # outside the valid letters A-D
        ("\\boxed{42}", None),
        ("Answer: The mitochondria", None),  # option text without choices to match it
        ("Answer: B and C", None),
        ("<think>The answer is A.</think>I am not sure.", None),  # only a draft in the reasoning
        ("", None),
        ("I", None),
    ],
)
def test_the_picked_letter(rewards, response, picked):
    for letter in "ABCD":
        expected = 1.0 if letter == picked else 0.0
        assert graded(rewards["gpqa"], response, letter) == expected, (response, letter)


def test_valid_letters_come_from_the_metadata(rewards):
    mc = rewards["multiple_choice"]
    assert graded(mc, "Answer: E", "E", valid_letters="ABCDE") == 1.0
    assert graded(mc, "Answer: E", "E", valid_letters=["A", "B", "C", "D", "E"]) == 1.0
    assert graded(mc, "Answer: E", "E", choices=["1", "2", "3", "4", "5"]) == 1.0
    assert graded(mc, "Answer: D", "C", valid_letters="ABC") == 0.0
    assert graded(mc, "Answer: C", "C", valid_letters="ABC") == 1.0
    with pytest.raises(ValueError, match="neither a letter in 'AB'"):
        graded(mc, "Answer: C", "C", valid_letters="AB")


CHOICES = ["Paris", "London", "Rome", "Berlin"]


@pytest.mark.parametrize(
    ("response", "label", "reward"),
    [
        ("The answer is Rome.", "C", 1.0),  # option text instead of the letter
        ("Answer: rome", "Rome", 1.0),
        ("The answer is Rome.", 2, 1.0),  # a 0-based position as the label
        ("Answer: (C)", "Rome", 1.0),  # an option's text as the label
        ("Answer: C", "(C)", 1.0),
        ("Answer: c.", "c", 1.0),
        ("The answer is Madrid.", "C", 0.0),
        ("I visited Rome once. The answer is Paris.", "C", 0.0),
        ("Answer: B", 1, 1.0),
        ("Answer: B", 0, 0.0),
    ],
)
def test_choices_let_the_answer_or_the_label_be_the_option_text(rewards, response, label, reward):
    assert graded(rewards["multiple_choice"], response, label, choices=CHOICES) == reward


def test_a_label_that_names_no_option_is_an_error(rewards):
    with pytest.raises(ValueError, match="multiple-choice label 'Madrid' is neither a letter"):
        graded(rewards["multiple_choice"], "Answer: A", "Madrid", choices=CHOICES)


def test_boxed_multiple_choice_needs_the_box(rewards):
    assert graded(rewards["boxed_multiple_choice"], "Hence \\boxed{C}", "C") == 1.0
    assert graded(rewards["boxed_multiple_choice"], "The answer is C.", "C") == 0.0


def test_exact_match_wants_the_label_and_nothing_else():
    from slime_core.sample import Sample
    from slime_rewards.functions import exact_match_reward

    assert exact_match_reward(Sample(response=" 49\n", label="49")) == 1.0
    assert [exact_match_reward(Sample(response=r, label=49)) for r in ("4", "490", "49x", "50", "")] == [0.0] * 5
    assert exact_match_reward(Sample(response="49", label=None)) == 0.0
