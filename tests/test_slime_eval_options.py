"""slime's evaluation and reward-logging flags through ``slime run`` (FSDP, the CPU engine, Ray):
an ``--eval-config`` YAML whose datasets have their own keys, lengths, sampling and reward, the
``--eval-*`` flags they fall back to, ``--skip-eval-before-train``, ``--eval-reward-key`` and
``--log-reward-category``."""

import json

import pytest

from slime_core import hookimpl

pytestmark = pytest.mark.integration


def digit_dict(sample, config) -> dict:
    """The digit share to train on, a constant score for evaluation, and a category."""
    share = sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)
    return {"digits": share, "eval_score": 2.0, "cat": "some_digits" if share else "no_digits"}


class _Plugin:
    """The dict reward, and the evaluations' scored groups by rollout id."""

    evaluations: dict = {}

    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register("digit_dict", digit_dict)

    @staticmethod
    @hookimpl
    def slime_log_eval(rollout_id, config, groups, metrics):
        _Plugin.evaluations[rollout_id] = groups


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_an_eval_config_with_its_own_keys_lengths_sampling_and_reward(slime_run, tmp_path):
    quiz = write_jsonl(tmp_path / "quiz.jsonl", [{"question": f"{a}+1=", "answer": str(a + 1)} for a in range(3)])
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"q": "3+3=", "a": "6"}, {"q": "12+34=", "a": "46"}])
    with plain.open("a") as handle:
        handle.write(json.dumps({"q": "1+1+1+1=", "a": "4"}) + "\n")  # 8 tokens: over --eval-max-prompt-len
    config = tmp_path / "eval.yaml"
    config.write_text(
        "eval:\n"
        "  defaults: {max_response_len: 8}\n"
        "  datasets:\n"
        f"    - {{name: quiz, path: {quiz}, input_key: question, label_key: answer, n_samples_per_eval_prompt: 2,\n"
        f"       min_new_tokens: 6, stop_token_ids: {list(range(4, 80))}, metadata_overrides: {{split: test}}}}\n"
        f"    - {{name: plain, path: {plain}}}\n"
    )
    _Plugin.evaluations = {}
    records = slime_run(
        "--num-rollout",
        "1",
        "--rm-type",
        "digit_dict",
        "--reward-key",
        "digits",
        "--eval-reward-key",
        "eval_score",
        "--log-reward-category",
        "cat",
        "--eval-config",
        str(config),
        "--eval-input-key",
        "q",
        "--eval-label-key",
        "a",
        "--eval-max-prompt-len",
        "6",
        "--eval-max-context-len",
        "10",
        "--eval-interval",
        "1",
        "--skip-eval-before-train",
        hooks=[_Plugin],
    )
    assert list(_Plugin.evaluations) == [0]  # --skip-eval-before-train: none at rollout -1
    groups = _Plugin.evaluations[0]
    quiz_samples = [s for group in groups["quiz"] for s in group]
    assert [len(group) for group in groups["quiz"]] == [2, 2, 2] and quiz_samples[0].label == "1"
    assert all(s.metadata["split"] == "test" for s in quiz_samples)
    # min_new_tokens 6 holds back the stop tokens (most of the vocabulary), and 10 - 4 prompt tokens end it
    assert [s.response_length for s in quiz_samples] == [6] * 6
    plain_samples = [s for group in groups["plain"] for s in group]
    assert [(s.prompt, s.label) for s in plain_samples] == [("3+3=", "6"), ("12+34=", "46")]  # one dropped
    assert all(len(s.tokens) <= 10 for s in plain_samples)  # --eval-max-context-len
    metrics = records[0]
    assert metrics["eval/quiz/reward_mean"] == 2.0 and metrics["eval/plain/reward_mean"] == 2.0
    assert metrics["eval/quiz/response_length_mean"] == 6
    assert 0 <= metrics["rollout/reward_mean"] <= 1  # trained on --reward-key digits
    for prefix in ("rollout/error_cat/", "eval/quiz/error_cat/"):
        shares = {k: v for k, v in metrics.items() if k.startswith(prefix)}
        assert set(shares) <= {prefix + "some_digits", prefix + "no_digits"} and sum(shares.values()) == 1
