"""Answer extraction and normalisation for the math grader: what a human reads as the final answer."""

import pytest

from slime_rewards.math.extract import boxed_spans, ends_in_open_box, extract_answer, last_boxed
from slime_rewards.math.grader import choice_letter, reference_answers
from slime_rewards.math.normalize import compact, normalize_answer

BOXED = [
    (r"So the answer is $\boxed{42}$.", "42"),
    (r"Thus $x = \boxed{\frac{1}{\sqrt{2}}}$.", r"\frac{1}{\sqrt{2}}"),
    (r"$\boxed{\left\{ 1, 2 \right\}}$", r"\left\{ 1, 2 \right\}"),
    (r"$\boxed{\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}}$", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"So the number of ways is \fbox{9}.", "9"),
    (r"The answer is \boxed 5.", "5"),
    (r"The answer is \boxed {7}.", "7"),
    (r"First we guess \boxed{3}; correcting the sign, the answer is \boxed{-3}.", "-3"),
    (r"The set is $\boxed{\{x \mid x > \frac{1}{2}\}}$.", r"\{x \mid x > \frac{1}{2}\}"),
    (r"Answer: 12. Boxed for clarity: \boxed{13}", "13"),  # an explicit box beats a phrase
    ("</think>\n**Final Answer**\n\\[\n\\boxed{\\dfrac{7}{2}}\n\\]", r"\dfrac{7}{2}"),
    ("<think>so it is \\boxed{5}? No.</think>\n\nThe answer is 6.", "6"),  # a draft in the reasoning
    ("<think>so it is \\boxed{5}</think>\n", "5"),  # nothing after the reasoning
]

PHRASES = [
    ("The answer is 42.", "42"),
    ("The answer is 42!", "42"),
    ("The answer is $5!$.", "5!"),
    ("The answer is -3.", "-3"),
    ("The answer is 3.5.", "3.5"),
    ("The answer is 1,000.", "1,000"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", r"\frac{3}{4}"),
    ("**Final Answer**\n7", "7"),
    ("**Answer:** 15", "15"),
    ("Answer: 15 apples because each box holds 5.", "15 apples"),
    ("The answer is (B).", "(B)"),
    ("The correct option is C.", "C"),
    ("The answer is 5 (since 2 + 3 = 5).", "5"),
    ("The answer is 2.5 hours, i.e. 150 minutes.", "2.5 hours"),
    ("So the answer is $x = 3$ or $x = -3$.", "x = 3, x = -3"),
    ("Thus, the answer is \\(\\frac{7}{2}\\).", r"\frac{7}{2}"),
    ("The final answer is\n$$x^2 + 1$$", "x^2 + 1"),
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
    ("The answer is 24 because there are 4! orderings.", "24"),
    ("The answer is 15. Let me verify: 3 + 5 + 7 = 15.", "15"),
    ("Earlier the answer is 3. Redoing it: the answer is 4.", "4"),
]

CONCLUSIONS = [
    ("The radius is 2.\n\nHence the area is $12\\pi$.", r"12\pi"),
    ("So there are 35 ways.", "35"),
    ("Each is 60 meters, so 9 * 60 = 540 meters.\n\nTherefore, he runs 540 meters a week.", "540"),
    ("Therefore the area is $12\\pi$. Note that $\\pi \\approx 3.14$.", r"12\pi"),
    ("So we have found the total. It is 35.", "35"),
    ("Thus we find a = 2. Then b = 4 and a + b = 6.", "6"),
    ("So the area is $12\\pi$. This is approximately 37.7 square units.", r"12\pi"),
    ("So the total is 540 meters", "540"),  # an unfinished concluding sentence still concludes
    ("Thus, she pays $\\$64$ in total.", r"\$64"),
]

NO_ANSWER = [
    "",
    "I'm not sure how to approach this problem.",
    "Case 1: x = 12",  # mid-computation, nothing concluded
    "If $n = 12$ the sum is 78, which is too small. If $n = 13$, the sum is 91.",
    # truncated mid-sentence although a concluding word and the right number came before
    "Each is 60 meters, so 9 * 60 = 540 meters. But wait, we should also",
    "so $x = 7$. Now we need to check whether $x = 7$ satisfies the second condition, which requires",
    # a truncated last box: the final answer was never finished
    r"After simplification the expression is 10, so the answer is $\boxed{1",
    r"We get \boxed{5}. Wait, that is wrong; the final answer is \boxed{\frac{a}{b",
    r"The final answer is \boxed",
    "<think>The answer is \\boxed{5}.</think> Let me write the final answer: \\boxed{",
    "<think>6 * 7 = 42, so the answer is \\boxed{42}. Let me double-check by",  # still reasoning
]


@pytest.mark.parametrize("response, answer", BOXED + PHRASES + CONCLUSIONS)
def test_extracts_the_final_answer(response, answer):
    assert extract_answer(response) == answer


@pytest.mark.parametrize("response", NO_ANSWER)
def test_responses_without_a_final_answer_have_none(response):
    assert extract_answer(response) is None


def test_boxed_spans_are_balanced_and_skip_cut_off_boxes():
    text = r"a \boxed{x^{2}} b \fbox{\{1\}} c \boxed{\frac{1}{2"
    assert boxed_spans(text) == [(2, "x^{2}"), (18, r"\{1\}")]
    assert last_boxed(text) == r"\{1\}"
    assert ends_in_open_box(text)
    assert not ends_in_open_box(r"\boxed{1} and more text")
    assert not ends_in_open_box("no box at all")
    assert last_boxed("no box at all") is None


@pytest.mark.parametrize(
    "raw, canonical",
    [
        (r"$\dfrac{1}{2}$.", r"\frac{1}{2}"),
        (r"\tfrac12", r"\frac{1}{2}"),
        (r"\frac1{2}", r"\frac{1}{2}"),
        (r"\left( \frac{1}{2}, 3 \right)", r"(\frac{1}{2}, 3)"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"\sqrt[3]x", r"\sqrt[3]{x}"),
        (r"\dbinom{10}{3}", r"\binom{10}{3}"),
        (r"{10 \choose 3}", r"\binom{10}{3}"),
        (r"\text{Monday}", "Monday"),
        (r"\textbf{(C)}", "(C)"),
        (r"5\,\text{cm}", "5 cm"),
        (r"30^\circ", "30°"),
        (r"30^{\circ}", "30°"),
        (r"12.5\%", "12.5%"),
        ("1,000,000", "1000000"),
        ("1{,}000", "1000"),
        (r"10\,000", "10000"),
        (r"\$1,234.50", r"\$1234.50"),
        ("1,2", "1,2"),  # a list, not a thousands separator
        (r"x \leq 3", r"x \le 3"),
        (r"\varnothing", r"\emptyset"),
        ("10!", "10!"),  # a factorial, not an exclamation
        ("{5}", "5"),
        ("  7 . ", "7"),
    ],
)
def test_normalize_answer(raw, canonical):
    """Spelling is canonical up to spaces (which `compact` removes for comparison)."""
    assert compact(normalize_answer(raw)) == compact(canonical)


@pytest.mark.parametrize(
    "answer, letter",
    [
        ("C", "C"),
        ("(C)", "C"),
        ("(C) 15", "C"),
        ("option c", "C"),
        ("B.", "B"),
        ("B and C", None),
        ("(A), (D)", None),
        ("A or B", None),
        ("Both", None),
        ("12", None),
    ],
)
def test_choice_letter(answer, letter):
    assert choice_letter(answer) == letter


@pytest.mark.parametrize(
    "label, golds",
    [
        ("42", ["42"]),
        (42, ["42"]),
        (0.5, ["0.5"]),
        (1e-7, ["0.0000001"]),
        (["1/2", 0.5], ["1/2", "0.5"]),
        (r"We compute ... so the answer is $\boxed{\frac{3}{4}}$.", [r"\frac{3}{4}"]),
        ("Natalia sold 48 + 24 = 72 clips.\n#### 72", ["72"]),
        (None, []),
        ("  ", []),
    ],
)
def test_reference_answers(label, golds):
    assert reference_answers(label) == golds
