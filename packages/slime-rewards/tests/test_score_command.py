"""`slime reward score`, run as a user runs it."""

import json
import subprocess
import sys
from pathlib import Path

SLIME = str(Path(sys.executable).with_name("slime"))

JUDGE = """
from slime_core import hookimpl

@hookimpl
def slime_register_reward_functions(register):
    register("starts_with_label", lambda sample, config: float(sample.response.startswith(str(sample.label))))
    register("picky", picky)

def picky(sample, config):
    if sample.metadata.get("bad"):
        raise RuntimeError("cannot grade this one")
    return {"score": 1.0, "acc": True}
"""


def score(tmp_path, lines, *args):
    (tmp_path / "judge_plugin.py").write_text(JUDGE)
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    env = {"PYTHONPATH": str(tmp_path), "PATH": ""}
    result = subprocess.run(
        [SLIME, "-p", "judge_plugin", "reward", "score", str(data), "-o", str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    scored = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return result, scored, data


def test_scores_lines_and_keeps_their_fields(tmp_path):
    lines = [
        json.dumps({"response": "42 apples", "label": 42, "id": 1}),
        json.dumps({"response": "7", "label": 8, "id": 2}),
    ]
    result, scored, _ = score(tmp_path, lines, "--rm-type", "starts_with_label")
    assert result.returncode == 0, result.stderr
    assert scored == [
        {"response": "42 apples", "label": 42, "id": 1, "reward": 1.0},
        {"response": "7", "label": 8, "id": 2, "reward": 0.0},
    ]
    assert "scored 2 lines: mean reward 0.5000, 0 failed, 0 malformed" in result.stderr


def test_malformed_lines_are_reported_by_number_and_failures_recorded(tmp_path):
    lines = [
        json.dumps({"response": "a", "label": "x"}),
        '{"response": "b", ',
        json.dumps({"label": "no response"}),
        json.dumps({"response": "c", "label": "x", "metadata": {"bad": True}}),
    ]
    result, scored, data = score(tmp_path, lines, "--rm-type", "picky", "--reward-key", "score")
    assert result.returncode == 1
    assert f"{data}:2: invalid JSON" in result.stderr
    assert f"{data}:3: expected a JSON object with a 'response' key" in result.stderr
    assert [line["reward"] for line in scored] == [{"score": 1.0, "acc": True}, None]
    assert (
        "reward function 'picky' (plugin 'judge_plugin', local module) raised RuntimeError" in scored[1]["reward_error"]
    )
    assert "scored 2 lines: mean reward 1.0000, 1 failed, 2 malformed" in result.stderr


def test_unknown_option_is_a_clear_error(tmp_path):
    result, _, _ = score(tmp_path, [json.dumps({"response": "a"})], "--rm-type", "picky", "--rm-timout", "3")
    assert result.returncode == 2
    assert "unknown option --rm-timout; did you mean --rm-timeout?" in result.stderr
