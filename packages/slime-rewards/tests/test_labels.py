"""Each built-in reward declares the labels it grades; a record whose label it cannot grade is
refused before a run starts (file:line, the reward, what it expects) instead of scoring 0."""

import json

import pytest

from slime_core.cli.run import run_command
from slime_core.plugins import Plugins
from slime_core.sample import Sample

#: reward -> (labels it grades, labels it cannot grade: each scored a silent 0 or -1, or raised mid-run)
CASES = {
    "exact_match": (["49", 49, 4.5], [None, {"answer": "49"}, ["49"], True, " "]),
    "math": (["49", 49, "\\frac{1}{2}", ["49", "forty-nine"]], [None, {"answer": "49"}, [], [None], ""]),
    "dapo": (["49", ["49", "50"]], [None, {"answer": "49"}]),
    "f1": (["the cat", ["a", "b"], {"text": ["the cat"]}], [None, {"answers": ["a"]}]),
    "gpqa": (["B", "(B)", 1], [None, 1.0, ["B"], True]),
    "code": (
        ["assert f(1) == 2", [{"input": "1", "output": "2"}], {"inputs": ["1"], "outputs": ["2"]}],
        [None, 42, [], {"tests": []}],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_reward_declares_what_it_grades(name):
    registry = Plugins().registry("reward_functions")
    check = registry.label_check(name)
    assert registry.label_check(f"boxed_{name}") is check
    graded, refused = CASES[name]
    assert [check(label, {}) for label in graded] == [None] * len(graded)
    assert all(isinstance(check(label, {}), str) for label in refused)


def test_code_tests_in_the_metadata_make_the_label_free():
    check = Plugins().registry("reward_functions").label_check("code")
    assert check(None, {"tests": "assert f(1) == 2"}) is None


@pytest.mark.parametrize("label", [{"answer": "49"}, ["49"]], ids=["dict", "list"])
def test_labels_refused_are_ones_the_reward_silently_scores_0(label):
    """Before the check, exact_match scored these 0 for every response, the right one too."""
    reward = Plugins().registry("reward_functions").get("exact_match")
    assert reward(Sample(response="49", label=label), None) == 0.0


def test_a_run_and_its_dry_run_refuse_a_wrong_label_with_file_and_line(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(
            json.dumps(r) + "\n" for r in [{"prompt": "1+1=", "label": "2"}, {"prompt": "2+2=", "label": {"value": 4}}]
        )
    )
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rm-type",
        "boxed_math",
        "--rollout-batch-size",
        "1",
        "--num-rollout",
        "1",
        "--rollout-max-response-len",
        "8",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    for flags in ([], ["--dry-run"]):
        assert run_command([*argv, *flags], Plugins()) == 2
        assert (
            f"{data}:2: label {{'value': 4}} (dict) is not what reward function 'boxed_math' (plugin 'rewards', "
            "slime-rewards 0.1.0) grades: it expects text or a number (the reference answer), or a list of them "
            "(any of which is right); fix the label (--label-key label) or choose another --rm-type"
        ) in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
