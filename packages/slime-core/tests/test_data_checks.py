"""The prompt files are checked before anything starts, by ``slime run`` and by its dry run
alike: each bad record is reported with file:line, exit code 2, and no run directory."""

import json

import pytest

from slime_core import hookimpl
from slime_core.cli.run import run_command
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.plugins import Plugins
from slime_core.plugins.registry import Registry, RegistryError

GOOD = [{"prompt": f"{i}+1=", "label": str(i + 1)} for i in range(6)]


def wants_text(label, metadata):
    return None if isinstance(label, str) else "the answer as text"


class _Rewards:
    """A reward that declares its labels, and one that declares nothing."""

    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register("text_answer", lambda sample, config: 1.0, label=wants_text)
        register("anything", lambda sample, config: 1.0)


@pytest.fixture
def slime(tiny_model_dir, tmp_path, capsys):
    """``slime(data, *flags, dry_run)`` -> (exit code, stdout, stderr, whether a run directory
    was made): ``slime run`` on ``data`` with the tiny model (128 positions), rewards above."""

    def run(data, *flags, dry_run=False):
        plugins = Plugins()
        plugins.register_object("data_check_rewards", _Rewards)
        argv = [
            "--prompt-data",
            str(data),
            "--hf-checkpoint",
            str(tiny_model_dir),
            "--rm-type",
            "text_answer",
            "--rollout-batch-size",
            "2",
            "--rollout-max-response-len",
            "8",
            "--num-rollout",
            "1",
            "--output-dir",
            str(tmp_path / "run"),
            *flags,
            *(["--dry-run"] if dry_run else []),
        ]
        try:
            code = run_command(argv, plugins)
        finally:
            plugins.unregister("data_check_rewards")
        out, err = capsys.readouterr()
        return code, out, err, (tmp_path / "run").exists()

    return run


def write(path, records):
    path.write_bytes(b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in records))
    return path


def long_prompt(tokens):
    return {"prompt": "1" * (tokens - 1) + "=", "label": "1"}


BAD_DATA = {
    "not utf-8": ([*GOOD[:2], b'{"prompt": "caf\xe9=", "label": "1"}\n', *GOOD[2:]], ":3: not UTF-8 text (byte 0xe9"),
    "invalid json": ([*GOOD[:4], b'{"prompt": "1+1=", "label": \n'], ":5: invalid JSON"),
    "empty file": ([], "--prompt-data {path}: no prompts: the file holds no record"),
    "label of the wrong type": (
        [*GOOD[:1], {"prompt": "2+2=", "label": 4}],
        ":2: label 4 (int) is not what reward function 'text_answer' (plugin "
        "'data_check_rewards', local module) grades: it expects the answer as text",
    ),
    "prompt over the engine's budget": (
        [*GOOD[:3], long_prompt(120), *GOOD[3:]],
        ":4: the prompt has 120 tokens, more than the engine takes with a whole "
        "response: 119 = 128 (max_position_embeddings of --hf-checkpoint) − 8 "
        "(--rollout-max-response-len) − 1",
    ),
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry run", "run"])
@pytest.mark.parametrize("kind", list(BAD_DATA))
def test_bad_data_is_refused_before_anything_starts_with_file_and_line(slime, tmp_path, kind, dry_run):
    records, message = BAD_DATA[kind]
    path = write(tmp_path / "prompts.jsonl", records)
    code, out, err, started = slime(path, dry_run=dry_run)
    assert code == 2 and not started and not out
    assert message.format(path=path) in err, err
    assert "Traceback" not in err


def test_an_empty_slice_and_a_bad_eval_file_are_refused_too(slime, tmp_path):
    path = write(tmp_path / "prompts.jsonl", GOOD)
    evaluation = write(tmp_path / "eval.jsonl", [*GOOD[:1], {"prompt": "1+1=", "label": None}])
    code, _, err, started = slime(f"{path}@[10:20]", "--eval-prompt-data", "small", str(evaluation), dry_run=True)
    assert code == 2 and not started
    assert f"--prompt-data {path}@[10:20]: no prompts: the file selects none of the file's 6 records" in err
    assert f"{evaluation}:2: label None (NoneType) is not what reward function 'text_answer'" in err


def test_the_eval_budget_uses_the_eval_response_length(slime, tmp_path):
    path = write(tmp_path / "prompts.jsonl", GOOD)
    evaluation = write(tmp_path / "eval.jsonl", [long_prompt(100)])
    flags = ("--eval-prompt-data", "small", str(evaluation))
    assert slime(path, *flags, dry_run=True)[0] == 0
    code, _, err, _ = slime(path, *flags, "--eval-max-response-len", "40", dry_run=True)
    assert code == 2 and f"{evaluation}:1: the prompt has 100 tokens" in err
    assert "87 = 128 (max_position_embeddings of --hf-checkpoint) − 40 (--eval-max-response-len) − 1" in err


def test_each_eval_config_dataset_is_budgeted_with_its_own_response_length(slime, tmp_path):
    """``--eval-config`` gives each dataset its own ``max_response_len`` (else ``eval.defaults``'):
    the long one's prompts are measured against it, the other's against the flags'."""
    path = write(tmp_path / "prompts.jsonl", GOOD)
    evaluation = write(tmp_path / "eval.jsonl", [long_prompt(100)])
    config = tmp_path / "eval.yaml"
    config.write_text(
        "eval:\n  defaults: {max_response_len: 30}\n  datasets:\n"
        f"    - {{name: short, path: {evaluation}, max_response_len: 8}}\n"
        f"    - {{name: long, path: {evaluation}}}\n"
    )
    code, _, err, _ = slime(path, "--eval-config", str(config), dry_run=True)
    assert code == 2 and err.count(f"{evaluation}:1: the prompt has 100 tokens") == 1, err
    assert f"97 = 128 (max_position_embeddings of --hf-checkpoint) − 30 (--eval-config {config} eval.defaults " in err


def test_prompts_are_measured_after_the_chat_template(slime, tmp_path):
    """125 characters fit the CPU engine's 127 tokens (it shortens the response to fit), but not
    once the chat template adds its 3 tokens: measured as the engine will see it."""
    path = write(tmp_path / "prompts.jsonl", [*GOOD, long_prompt(125)])
    assert slime(path, "--rollout-engine", "cpu", dry_run=True)[0] == 0
    code, _, err, _ = slime(path, "--rollout-engine", "cpu", "--apply-chat-template", dry_run=True)
    assert code == 2
    assert (
        f"{path}:7: the prompt has 128 tokens after the chat template, more than the engine takes with a whole "
        "response: 127 = 128 (max_position_embeddings of --hf-checkpoint) − 0 (--rollout-engine cpu shortens "
        "the response to fit) − 1"
    ) in err


def test_over_long_prompts_are_dropped_and_counted_when_asked(slime, tmp_path, caplog):
    path = write(tmp_path / "prompts.jsonl", [*GOOD[:2], long_prompt(120), *GOOD[2:]])
    code, out, _, started = slime(path, "--rollout-max-prompt-len", "16", dry_run=True)
    assert code == 0 and not started
    assert f"{path}: 6 prompts of at most 4 tokens" in out and "1 dropped as longer than 16 tokens" in out
    assert (
        f"dropped 1 of 7 prompts longer than 16 tokens (--rollout-max-prompt-len), the first at {path}:3" in caplog.text
    )
    code, _, err, _ = slime(path, "--rollout-max-prompt-len", "2", dry_run=True)
    assert code == 2 and f"{path}: no prompts left: all 7 are longer than 2 tokens (--rollout-max-prompt-len)" in err


def test_a_response_limit_that_leaves_no_room_is_one_error(slime, tmp_path):
    path = write(tmp_path / "prompts.jsonl", GOOD)
    code, _, err, _ = slime(path, "--rollout-max-response-len", "1024", dry_run=True)
    assert code == 2 and err.count("\n  - ") == 1
    assert "--rollout-max-response-len 1024 leaves no room for a prompt in the engine's context of 128 tokens" in err
    assert slime(path, "--rollout-max-response-len", "1024", "--rollout-engine", "cpu", dry_run=True)[0] == 0


def test_sft_and_undeclared_rewards_are_not_checked(slime, tmp_path):
    path = write(tmp_path / "prompts.jsonl", [{"prompt": "1+1=", "label": 2}, long_prompt(500)])
    assert slime(path, "--rm-type", "anything", "--rollout-engine", "cpu", dry_run=True)[0] == 2  # the length only
    assert slime(path, "--rollout-function", "sft", "--loss-type", "sft_loss", dry_run=True)[0] == 0


def test_the_run_takes_over_the_datasets_the_checks_loaded(tmp_path, tokenizer):
    path = write(tmp_path / "prompts.jsonl", GOOD)
    fmt = PromptFormat(max_prompt_len=16)
    checked = PromptDataset.checked(str(path), fmt, tokenizer)
    assert PromptDataset.load(str(path), fmt, tokenizer) is checked  # tokenized once
    assert PromptDataset.load(str(path), fmt, tokenizer) is not checked  # handed over once


def test_only_reward_functions_declare_labels():
    registry = Registry("group_filters")
    with pytest.raises(RegistryError, match="only reward functions declare one"):
        registry.register("f", lambda *a: True, "p", "d", label=wants_text)
