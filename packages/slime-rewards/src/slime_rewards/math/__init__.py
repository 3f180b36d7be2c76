"""The math grader: answer extraction, LaTeX normalisation, equivalence under a time limit.

    from slime_rewards.math import grade_math
    grade_math(r"... so the answer is $\\boxed{\\frac{1}{2}}$.", "0.5")  # True

Names are imported on first use, so graders that only need extraction (f1, multiple
choice) do not pay for importing sympy.
"""

import importlib

_EXPORTS = {
    "grade_math": "grader",
    "answers_match": "grader",
    "reference_answers": "grader",
    "extract_answer": "extract",
    "last_boxed": "extract",
    "normalize_answer": "normalize",
    "equivalent": "equivalence",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'slime_rewards.math' has no attribute {name!r}")
    return getattr(importlib.import_module(f"slime_rewards.math.{_EXPORTS[name]}"), name)
