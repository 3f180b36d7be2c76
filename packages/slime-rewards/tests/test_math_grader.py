"""The math grader's verdicts, checked against what a careful human grader would say.

Every case is (predicted final answer, reference answer). Positives are answers a human
marks right although they are written differently; negatives are answers that *look*
right (a sign error, 0.5 for 5, the right number in the wrong unit) and are wrong.
"""

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from slime_core import Sample
from slime_core.config import Config
from slime_core.plugins import Plugins
from slime_rewards.math.grader import grade_math
from slime_rewards.math.time_limit import call_with_time_limit

SAME = {
    "fraction_decimal": [
        (r"\frac{1}{2}", "0.5"),
        ("0.5", r"\frac{1}{2}"),
        (r"\dfrac{3}{4}", "0.75"),
        ("1/2", r"\frac12"),
        (r"\frac{-1}{2}", r"-\frac{1}{2}"),
        (r"\frac{1}{-2}", "-0.5"),
        ("12.00", "12"),
        ("012", "12"),
        ("-0", "0"),
        (r"\frac{7}{2}", "3.5"),
        (r"0.\overline{3}", r"\frac{1}{3}"),
        (r"0.1\overline{6}", r"\frac{1}{6}"),
        (r"\frac{6}{4}", r"\frac{3}{2}"),
    ],
    "mixed_number": [
        (r"2\frac{1}{2}", r"\frac{5}{2}"),
        (r"2 \frac{1}{2}", "2.5"),
        (r"-2\frac{1}{2}", "-2.5"),
        (r"\frac{7}{2}", r"3\frac{1}{2}"),
        (r"2\tfrac{1}{3}", r"\frac{7}{3}"),
    ],
    "radical": [
        (r"\sqrt{8}", r"2\sqrt{2}"),
        (r"\sqrt{27}", r"3\sqrt{3}"),
        (r"2\sqrt5", r"2\sqrt{5}"),
        (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"),
        (r"\frac{3}{\sqrt{3}}", r"\sqrt{3}"),
        (r"\sqrt[3]{27}", "3"),
        (r"\sqrt[3]{-8}", "-2"),
        (r"\sqrt[4]{16}", "2"),
        (r"\sqrt[3]{2}", "2^{1/3}"),
    ],
    "factorial_binomial": [
        ("10!", "3628800"),
        ("5!", "120"),
        (r"\frac{10!}{2!\,8!}", "45"),
        ("(3!)^2", "36"),
        (r"\binom{10}{3}", "120"),
        (r"\dbinom{5}{2}", "10"),
        (r"{10 \choose 3}", "120"),
    ],
    "scientific": [
        (r"3 \times 10^5", "300000"),
        (r"3 \times 10^{5}", "300,000"),
        (r"1.5\times10^{-3}", "0.0015"),
        (r"6.02 \times 10^{23}", r"6.02\cdot 10^{23}"),
        ("3e5", "300000"),
        ("1.5e-3", "0.0015"),
        ("10^{-3}", "0.001"),
        ("2^{10}", "1024"),
        ("2^10", "1024"),
    ],
    "thousands": [
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        (r"10\,000", "10000"),
        ("1 000 000", "1000000"),
        ("12,345,678", "12345678"),
        (r"\$1,234.56", "1234.56"),
        ("1000", "1,000"),
        ("1000", r"1,\!000"),
    ],
    "percent": [
        (r"50\%", "0.5"),
        (r"50\%", "50"),
        ("0.25", r"25\%"),
        ("25", r"25\%"),
        (r"12.5\%", r"12.5\%"),
        (r"100\%", "1"),
        (r"\frac{1}{2}\%", r"0.5\%"),
        ("20 percent", r"20\%"),
    ],
    "degrees": [
        (r"90^\circ", r"\frac{\pi}{2}"),
        (r"30^\circ", r"\frac{\pi}{6}"),
        (r"\frac{\pi}{3}", r"60^\circ"),
        ("90", r"90^\circ"),
        (r"45 \text{ degrees}", r"45^\circ"),
        ("120°", r"120^\circ"),
        (r"30^\circ", "30"),
    ],
    "units": [
        (r"500 \text{ cm}", r"5 \text{ m}"),
        (r"120 \text{ minutes}", r"2\text{ hours}"),
        (r"4 \text{ feet}", r"48 \text{ inches}"),
        (r"12 \text{ m}^2", r"120000 \text{ cm}^2"),
        (r"12 \text{ cm}^2", "12"),
        (r"\$5.00", "5"),
        (r"5 \text{ dollars}", r"\$5"),
        (r"6 \text{ square units}", "6"),
        ("15 apples", "15"),
        (r"2\text{ km}", r"2000 \text{ m}"),
        (r"90 \text{ min}", r"1.5 \text{ hours}"),
        (r"30 \text{ sec}", r"0.5 \text{ min}"),
        (r"3\text{ mL}", r"3 \text{ cm}^3"),
        (r"2 \text{ gallons}", r"7.570823568 \text{ L}"),
    ],
    "expression": [
        ("x^2+2x+1", "(x+1)^2"),
        ("x^2-1", "(x-1)(x+1)"),
        (r"\frac{x^2-1}{x-1}", "x+1"),
        ("6yx^2", "6x^2y"),
        (r"\frac{1}{2}x", r"\frac{x}{2}"),
        ("a+b", "b+a"),
        (r"\frac{n(n+1)}{2}", r"\frac{n^2+n}{2}"),
        ("2^{n+1}", r"2\cdot 2^n"),
        (r"\frac{4}{3}\pi r^3", r"\frac{4\pi r^3}{3}"),
        ("x_1 + x_2", "x_2+x_1"),
        (r"\alpha+\beta", r"\beta+\alpha"),
        (r"\sum_{k=1}^{n} k", r"\frac{n(n+1)}{2}"),
    ],
    "trig_log": [
        (r"\sin 2x", r"2\sin x \cos x"),
        (r"\sin^2 x + \cos^2 x", "1"),
        (r"\log_2 8", "3"),
        (r"\ln e^2", "2"),
        (r"\frac{\ln 5}{\ln 2}", r"\log_2 5"),
        (r"\arctan 1", r"\frac{\pi}{4}"),
        (r"\tan^{-1} 1", r"\frac{\pi}{4}"),
        (r"\sin^{-1}\left(\frac{1}{2}\right)", r"\frac{\pi}{6}"),
        (r"e^{\ln 3}", "3"),
        (r"\log_{10} 100", "2"),
    ],
    "complex": [
        ("4i+3", "3+4i"),
        (r"\frac{1+i}{2}", r"\frac{1}{2}+\frac{i}{2}"),
        (r"e^{i\pi}", "-1"),
        (r"\sqrt{-4}", "2i"),
    ],
    "rounded_reference": [
        (r"\frac{1}{3}", "0.33"),
        (r"\frac{2}{3}", "0.67"),
        (r"\pi", "3.14"),
        (r"\sqrt{2}", "1.41"),
    ],
    "interval": [
        (r"x \le 3", r"(-\infty, 3]"),
        (r"-2 \le x < 5", "[-2, 5)"),
        (r"\left(0, \dfrac{1}{2}\right]", r"(0, \frac{1}{2}]"),
        (r"x < -1 \text{ or } x > 2", r"(-\infty,-1)\cup(2,\infty)"),
        (r"(3,\infty)\cup(-\infty,2)", r"(-\infty, 2) \cup (3, \infty)"),
        (r"x \in [1,2]", "[1, 2]"),
        (r"0 \le y \le 1", "[0, 1]"),
        (r"\mathbb{R}", r"(-\infty, \infty)"),
        (r"\text{all real numbers}", r"(-\infty,\infty)"),
        ("x > 3", r"(3, \infty)"),
        (r"x \neq 2", r"(-\infty,2)\cup(2,\infty)"),
        (r"\mathbb{R} \setminus \{2\}", r"(-\infty, 2) \cup (2, \infty)"),
        (r"\{x \mid x \le 3\}", r"(-\infty, 3]"),
        (r"\{x : -1 < x < 1\}", "(-1, 1)"),
    ],
    "set_list": [
        (r"\{3, 1, 2\}", r"\{1, 2, 3\}"),
        ("1, 2, 3", r"\{1,2,3\}"),
        ("3, -2", "-2, 3"),
        (r"x = -2 \text{ or } x = 3", "-2, 3"),
        (r"2 \text{ and } 3", "2, 3"),
        (r"\pm 2", "-2, 2"),
        (r"k = 2 \text{ or } k = -2", r"\pm 2"),
        (r"2 \pm \sqrt{3}", r"2+\sqrt{3}, 2-\sqrt{3}"),
        (r"\varnothing", r"\emptyset"),
        (r"\{\}", r"\emptyset"),
        ("(3,4), (1,2)", r"(1, 2) \text{ and } (3, 4)"),
        (r"\text{no solution}", r"\emptyset"),
        (r"\text{None}", r"\text{no solutions}"),
    ],
    "tuple_vector": [
        ("(2,-1)", "(2, -1)"),
        ("x=2, y=-1", "(2, -1)"),
        ("y=-1, x=2", "(2, -1)"),
        ("b = 3, a = 2", "(2, 3)"),
        (r"\theta = \frac{\pi}{2}, r = 3", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\langle 1,-2,3\rangle", r"\begin{pmatrix} 1 \\ -2 \\ 3 \end{pmatrix}"),
        ("(-1, 4)", r"\begin{pmatrix} -1 \\ 4 \end{pmatrix}"),
        (r"\left(\frac{1}{2}, 3\right)", "(0.5, 3)"),
    ],
    "matrix": [
        (r"\begin{bmatrix} 2 & 1 \\ 0 & 3 \end{bmatrix}", r"\begin{pmatrix} 2 & 1 \\ 0 & 3 \end{pmatrix}"),
        (
            r"\begin{pmatrix} \frac{1}{2} & 0 \\ 0 & -1 \end{pmatrix}",
            r"\begin{pmatrix} 1/2 & 0 \\ 0 & -1 \end{pmatrix}",
        ),
    ],
    "equation": [
        ("y = 3 + 2x", "y = 2x + 3"),
        ("2x - y + 3 = 0", "y = 2x + 3"),
        ("x = 5", "5"),
        ("5", "x = 5"),
        ("f(x) = 2x+1", "2x + 1"),
        ("f(x) = 2x+1", "f(x) = 2x + 1"),
        ("x^2+y^2=4", "y^2 + x^2 = 4"),
        ("4 = n", "4"),
        (r"x \equiv 3 \pmod{7}", "3"),
        ("7", r"7 \pmod{12}"),
    ],
    "choice": [
        ("C", "C"),
        (r"\text{(C)}", "C"),
        (r"\textbf{(C)}\ 12", "C"),
        ("(B)", r"\text{(B)}"),
        ("option D", "D"),
    ],
    "text": [
        (r"\text{Monday}", "Monday"),
        (r"\text{no solution}", r"\text{No solution}"),
        (r"\text{Yes}", "yes"),
        (r"\text{even}", r"\text{Even}"),
        (r"\infty", r"\text{infinity}"),
        (r"\text{five}", "5"),
        ("12", r"\text{Twelve}"),
        (r"\text{DNE}", r"\text{does not exist}"),
    ],
    "time_of_day": [
        (r"2:30 \text{ PM}", r"2:30 \text{ PM}"),
        (r"2:30 \text{ p.m.}", r"2:30 \text{ PM}"),
        ("14:30", r"2:30 \text{ PM}"),
        (r"9:05 \text{ AM}", "9:05"),
    ],
    "ratio_abs_floor": [
        ("3:2", r"\frac{3}{2}"),
        (r"\left|-3\right|", "3"),
        (r"\lfloor 3.7 \rfloor", "3"),
        (r"\lceil 3.2 \rceil", "4"),
    ],
}

DIFFERENT = {
    "sign": [
        ("-3", "3"),
        (r"\frac{1}{2}", r"-\frac{1}{2}"),
        ("3-4i", "3+4i"),
        ("y = -2x + 3", "y = 2x + 3"),
        ("a-b", "b-a"),
        (r"-\infty", r"\infty"),
        ("(-2, 1)", "(2, -1)"),
    ],
    "magnitude": [
        ("0.5", "5"),
        ("5", "0.5"),
        ("50", "0.5"),
        ("2.5", r"25\%"),
        ("20", "0.2"),
        (r"3 \times 10^5", "30000"),
        (r"3 \times 10^5", r"3 \times 10^6"),
        ("1.234", "1234"),
        ("10^{3}", "0.001"),
        ("1000000001", "1000000000"),
    ],
    "near_miss_number": [
        (r"\frac{1}{3}", r"\frac{1}{2}"),
        ("0.333", r"\frac{1}{3}"),
        ("1.414", "1.41"),
        ("1.41", r"\sqrt{2}"),
        (r"\frac{2}{3}", "0.66"),
        ("3.14", r"\pi"),
        ("12", r"12\pi"),
        (r"\sqrt{8}", r"2\sqrt{3}"),
        ("11!", "3628800"),
        (r"\binom{10}{4}", "120"),
        (r"2\frac{1}{2}", "2.25"),
        (r"0.\overline{3}", r"\frac{1}{2}"),
    ],
    "wrong_unit": [
        (r"5 \text{ cm}", r"5 \text{ m}"),
        (r"2 \text{ minutes}", r"2\text{ hours}"),
        (r"50 \text{ m/s}", r"50\text{ km/h}"),
        (r"12 \text{ cm}", r"12 \text{ cm}^2"),
        (r"3 \text{ hours}", r"3 \text{ minutes}"),
        (r"1 \text{ gallon}", r"1 \text{ liter}"),
        (r"5 \text{ L}", r"5 \text{ mL}"),
    ],
    "degrees_radians": [
        ("30", r"\frac{\pi}{6}"),
        (r"\frac{\pi}{6}", "30"),
        (r"\frac{\pi}{3}", "60"),
        ("1.0472", r"\frac{\pi}{3}"),
    ],
    "expression": [
        ("x^2+1", "(x-1)(x+1)"),
        ("x^2+2x-1", "(x+1)^2"),
        (r"\cos 2x", r"2\sin x \cos x"),
        ("2x+3", "2y+3"),
        (r"\frac{n(n+1)}{2}", r"\frac{n(n-1)}{2}"),
        (r"\frac{1}{2}", r"\frac{x}{2}"),
    ],
    "interval": [
        ("[1,2)", "[1,2]"),
        (r"x \ge 3", r"(3, \infty)"),
        ("[3,5]", "(3,5)"),
        (r"x \in (1,2]", "[1, 2]"),
        ("x < -1", r"(-\infty,-1)\cup(2,\infty)"),
        (r"x \ne 3", r"(-\infty,2)\cup(2,\infty)"),
    ],
    "set_list": [
        ("3", "-2, 3"),
        ("1, 2", r"\{1,2,3\}"),
        ("2, 3, 3", "2, 3"),
        (r"2 \text{ and } 4", "2, 3"),
        ("2", r"\pm 2"),
        ("x=2", r"\pm 2"),
        ("(1,2), (4,3)", "(3,4), (1,2)"),
    ],
    "tuple_matrix": [
        ("(2,1)", "(1,2)"),
        ("(1, 3, 2)", "(1,2,3)"),
        ("x = 2, y = 3", "(3,2)"),
        ("y = 2, x = 3", "(2,3)"),
        ("(1,2)", "(1,2,3)"),
        (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\begin{pmatrix}1&3\\2&4\end{pmatrix}"),
        (r"\begin{pmatrix}1&2\end{pmatrix}", r"\begin{pmatrix}1&0\\0&2\end{pmatrix}"),
    ],
    "thousands_vs_list": [("1,2", "12"), ("1,234", "1.234"), ("(1,000)", "1")],
    "equation": [("y = 2x - 3", "y=2x+3"), ("x^2+y^2=2", "x^2+y^2=4"), ("x = 3", "x = -3")],
    "choice": [("B", "C"), ("(B) 12", "C"), (r"\text{B and C}", "B"), ("12", "A")],
    "text": [
        (r"\text{Monday}", r"\text{Tuesday}"),
        (r"\text{odd}", r"\text{even}"),
        ("yes", "no"),
        (r"\text{not } 5", "5"),
        (r"\text{four}", "3"),
        (r"\text{undefined}", r"\text{DNE}"),
        (r"\text{infinitely many solutions}", r"\emptyset"),
    ],
    "time_of_day": [
        (r"2:30 \text{ AM}", r"2:30 \text{ PM}"),
        (r"1:30 \text{ PM}", r"2:30 \text{ PM}"),
        ("14:30", r"2:30 \text{ AM}"),
    ],
}


def _cases(groups):
    """pytest params named ``kind:pred|gold``."""
    return [
        pytest.param(pred, gold, id=f"{kind}:{pred}|{gold}") for kind, pairs in groups.items() for pred, gold in pairs
    ]


@pytest.mark.parametrize("pred, gold", _cases(SAME))
def test_equivalent_answers_are_right(pred, gold):
    assert grade_math(f"We simplify and get $\\boxed{{{pred}}}$.", gold)


@pytest.mark.parametrize("pred, gold", _cases(DIFFERENT))
def test_look_alike_answers_are_wrong(pred, gold):
    assert not grade_math(f"We simplify and get $\\boxed{{{pred}}}$.", gold)


RESPONSES = [
    # (response, label, human verdict)
    ("Each is 60 meters, so 9 * 60 = 540 meters.\n\nTherefore, he runs 540 meters a week.", "540", True),
    ("Each is 60 meters, so 9 * 60 = 540 meters. But wait, we should also", "540", False),
    ("So the total is 540 meters", "540", True),
    ("So the profit is $\\boxed{70{,}000}$ dollars.", "70000", True),
    ("The two solutions are $\\boxed{3}$ and $\\boxed{5}$.", "3, 5", True),
    ("Solving gives $x=\\boxed{2}$ and $y=\\boxed{-1}$.", "(2, -1)", True),
    ("Solving gives $x=\\boxed{-1}$ and $y=\\boxed{2}$.", "(2, -1)", False),
    ("The first root is $\\boxed{3}$.", "3, 5", False),
    ("The roots are $\\boxed{3}$ and $\\boxed{5}$, and also $\\boxed{7", "3, 5", False),
    ("<think>Roots \\boxed{3} and \\boxed{5}.</think>The roots are $\\boxed{3}$ and $\\boxed{7}$.", "3, 5", False),
    ("<think>It is \\boxed{5}.</think>\n\nRechecking, the answer is 6.", "6", True),
    ("After simplification the expression is 10, so the answer is $\\boxed{1", "1", False),
    ("I'm not sure how to approach this problem.", "7", False),
    ("The answer is 42! What a nice number.", "42", True),
    ("The answer is 5 (since 2 + 3 = 5).", "5", True),
    ("The answer is 2.5 hours, i.e. 150 minutes.", "2.5", True),
    ("Therefore the area is $12\\pi$. Note that $\\pi \\approx 3.14$.", "12\\pi", True),
    ("There are $\\boxed{10!}$ orderings.", "3628800", True),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", True),
    ("The answer is (C).", "C", True),
    ("**Answer: C**", "C", True),
    ("The answer is B and C.", "C", False),
    ("The capital of France is Paris. The answer is Paris.", "\\text{Paris}", True),
    ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "#### 72", True),
    ("So $x \\approx \\boxed{1.41}$.", "\\sqrt{2}", False),
    ("The answer is $\\boxed{}$.", "0", False),
]


@pytest.fixture(scope="module")
def math_reward():
    return Plugins().registry("reward_functions").get("math")


@pytest.mark.parametrize("response, label, verdict", RESPONSES)
def test_whole_responses_through_the_registered_reward(math_reward, response, label, verdict):
    sample = Sample(response=response, label=label, metadata={"source": "test"})
    assert math_reward(sample, None) == (1.0 if verdict else 0.0)
    assert math_reward(sample, Config({"math_timeout": 2.0})) == (1.0 if verdict else 0.0)


@pytest.mark.parametrize(
    "label, reward",
    [("3628800", 1.0), (3628800, 1.0), (3628800.0, 1.0), (["10!", "3628800"], 1.0), ("3628801", 0.0)],
)
def test_registered_math_reward_takes_any_label_form(math_reward, label, reward):
    sample = Sample(response="The number of arrangements is $\\boxed{10!}$.", label=label)
    assert math_reward(sample, None) == reward


@pytest.mark.parametrize("label", [None, [], "  "])
def test_a_sample_without_a_label_is_an_error_not_a_zero(math_reward, label):
    with pytest.raises(ValueError, match="reference answer"):
        math_reward(Sample(response="$\\boxed{1}$", label=label), None)


# Parses, but a sum with no closed form cannot be evaluated at the sample points quickly:
# only the time limit ends the comparison.
ADVERSARIAL = ("The value is $\\boxed{\\sum_{k=1}^{n} k^{k}}$.", "n")
LIMIT = 0.5
SLACK = 0.75


def test_time_limit_in_the_main_thread():
    """Hard even for C code: the call runs in a worker process that is killed at the deadline."""
    assert threading.current_thread() is threading.main_thread()
    assert grade_math(r"$\boxed{\frac{1}{2}}$", "0.5", LIMIT)  # a worker is up (start-up is not counted)
    start = time.perf_counter()
    assert grade_math(*ADVERSARIAL, timeout=LIMIT) is False
    assert time.perf_counter() - start < LIMIT + SLACK
    with pytest.raises(TimeoutError):
        call_with_time_limit(time.sleep, (10,), LIMIT)


def test_time_limit_in_a_worker_thread_uses_the_process_pool():
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade_math, r"$\boxed{\frac{1}{2}}$", "0.5", LIMIT).result()  # starts a worker
        start = time.perf_counter()
        assert pool.submit(grade_math, *ADVERSARIAL, LIMIT).result() is False
        assert time.perf_counter() - start < LIMIT + SLACK
        start = time.perf_counter()
        with pytest.raises(TimeoutError):
            pool.submit(call_with_time_limit, time.sleep, (10,), LIMIT).result()
        assert time.perf_counter() - start < LIMIT + 5.0  # a replacement worker starts without sympy
        assert pool.submit(call_with_time_limit, math.sqrt, (9.0,), LIMIT).result() == 3.0  # the pool recovers
