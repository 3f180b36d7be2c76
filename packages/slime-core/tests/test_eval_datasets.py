"""slime's evaluation config (``--eval-config``) and the data flags it shares with the rollout:
each dataset's keys, lengths, sampling and reward resolved as slime resolves them, a bad file
refused before anything starts naming the file and the entry, the chat template's extra
arguments, and the subsample of replayed rollouts."""

import json

import pytest

from slime_core.cli.run import run_command
from slime_core.data.eval_datasets import eval_datasets
from slime_core.data.prompt_dataset import PromptDataset, PromptFormat
from slime_core.plugins import Plugins
from slime_core.rollout.debug_data import load_rollout, save_rollout
from slime_core.rollout.evaluation import eval_sampling
from slime_core.rollout.result import RolloutResult
from slime_core.sample import Sample
from slime_core.testing.config import make_config

EVAL_YAML = """
eval:
  defaults:
    max_response_len: 6
    top_p: 0.7
  datasets:
    - name: quiz
      path: {quiz}
      input_key: question
      label_key: answer
      rm_type: math
      n_samples_per_eval_prompt: 3
      min_new_tokens: 2
      apply_chat_template: true
      apply_chat_template_kwargs: {{enable_thinking: false}}
      metadata_overrides: {{split: test}}
    - name: plain
      path: {plain}
      temperature: 0.5
"""


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def files(tmp_path):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "1+1=", "label": "2"}])
    quiz = write_jsonl(tmp_path / "quiz.jsonl", [{"question": "2+2=", "answer": "4"}])
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"q": "3+3=", "a": "6"}])
    config = tmp_path / "eval.yaml"
    config.write_text(EVAL_YAML.format(quiz=quiz, plain=plain))
    return prompts, config


def test_each_dataset_takes_its_entry_then_the_defaults_then_the_eval_flags_then_the_rollout_s(files, tiny_model_dir):
    prompts, path = files
    config = make_config(
        prompts,
        tiny_model_dir,
        rollout_batch_size=1,
        eval_config=path,
        eval_input_key="q",
        eval_label_key="a",
        eval_max_context_len=40,
        eval_min_new_tokens=1,
        rollout_temperature=0.9,
        eval_top_k=5,
    )
    quiz, plain = eval_datasets(config)
    assert config.eval_prompt_data == [
        "quiz",
        str(path.parent / "quiz.jsonl"),
        "plain",
        str(path.parent / "plain.jsonl"),
    ]
    assert (quiz.format.input_key, quiz.format.label_key, plain.format.input_key, plain.format.label_key) == (
        "question",
        "answer",
        "q",
        "a",
    )
    assert quiz.n_samples == 3 and plain.n_samples == 1
    assert quiz.metadata == {"split": "test", "rm_type": "math"} and plain.metadata == {}
    assert quiz.format.apply_chat_template and quiz.format.chat_template_kwargs == {"enable_thinking": False}
    assert quiz.format.max_prompt_len == 39  # --eval-max-context-len minus one
    assert quiz.sampling == {
        "max_response_len": 6,
        "temperature": 0.9,
        "top_p": 0.7,
        "top_k": 5,
        "stop": None,
        "stop_token_ids": None,
        "min_new_tokens": 2,
    }
    assert plain.sampling["temperature"] == 0.5 and plain.sampling["min_new_tokens"] == 1
    # --eval-max-context-len: the response stops where prompt and response fill the context
    assert eval_sampling(quiz, 30).max_new_tokens == 6 and eval_sampling(quiz, 37).max_new_tokens == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("eval: [1, 2", "{path}:1: not valid YAML (expected ',' or ']'"),
        ("eval:\n  datasets: []\n", "{path}: no datasets under eval.datasets"),
        ("eval:\n  datasets:\n    - name: a\n", "{path} eval.datasets[0]: `path` is missing"),
        (
            "eval:\n  datasets:\n    - name: a\n      path: x.jsonl\n    - name: b\n      path: y\n      top_q: 1\n",
            "{path} eval.datasets[1] ('b'): unknown key `top_q`; did you mean `top_p`?",
        ),
        (
            "eval:\n  datasets:\n    a: {{path: x.jsonl, repetition_penalty: 1.1}}\n",
            "{path} eval.datasets[0] ('a'): slime's `repetition_penalty` is not supported by this slime; remove it",
        ),
        (
            "eval:\n  defaults: {{maxresponse_len: 4}}\n  datasets: {{a: {{path: x}}}}\n",
            "{path} eval.defaults: unknown key `maxresponse_len`; did you mean `max_response_len`?",
        ),
    ],
)
def test_a_bad_eval_config_is_refused_before_anything_starts_naming_the_file_and_entry(
    tmp_path, tiny_model_dir, capsys, text, message
):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "1+1=", "label": "2"}])
    path = tmp_path / "eval.yaml"
    path.write_text(text.format())
    argv = ["--prompt-data", str(prompts), "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "1"]
    code = run_command([*argv, "--num-rollout", "1", "--eval-config", str(path), "--dry-run"], Plugins())
    err = capsys.readouterr().err
    assert code == 2 and f"--eval-config {message.format(path=path)}" in err, err


def test_eval_records_are_checked_with_the_dataset_s_own_keys(files, tiny_model_dir, capsys):
    prompts, path = files
    write_jsonl(path.parent / "quiz.jsonl", [{"question": "2+2=", "answer": "4"}, {"prompt": "5+5="}])
    argv = ["--prompt-data", str(prompts), "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "1"]
    code = run_command([*argv, "--num-rollout", "1", "--eval-config", str(path), "--dry-run"], Plugins())
    err = capsys.readouterr().err
    assert code == 2 and f"{path.parent / 'quiz.jsonl'}:2: no 'question' key" in err, err


def test_the_chat_template_gets_the_extra_arguments(tmp_path, tokenizer, tiny_model_dir):
    tokenizer.chat_template = "{% if enable_thinking is false %}[no think]{% endif %}{{ messages[0]['content'] }}"
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "label": "2"}])
    config = make_config(
        path,
        tiny_model_dir,
        rollout_batch_size=1,
        apply_chat_template=True,
        apply_chat_template_kwargs='{"enable_thinking": false}',
    )
    rendered = PromptDataset(str(path), PromptFormat.from_config(config), tokenizer).samples[0].prompt
    assert rendered == "[no think]1+1="
    plain = PromptDataset(str(path), PromptFormat(apply_chat_template=True), tokenizer).samples[0].prompt
    assert plain == "1+1="
    with pytest.raises(Exception, match="must be a JSON object"):
        make_config(path, tiny_model_dir, rollout_batch_size=1, apply_chat_template_kwargs="[1]")


def test_replayed_rollouts_keep_the_first_and_last_share_of_their_samples(tmp_path):
    groups = [[Sample(prompt=f"{g}", group_index=g, index=i) for i in range(4)] for g in range(3)]
    template = str(tmp_path / "rollout_{rollout_id}.json")
    save_rollout(template, 0, RolloutResult(groups, {}))
    kept = load_rollout(template, 0, subsample=0.5).groups  # 6 of 12: the first 3 and the last 3
    assert [[(s.group_index, s.index) for s in group] for group in kept] == [
        [(0, 0), (0, 1), (0, 2)],
        [(2, 1), (2, 2), (2, 3)],
    ]
    assert sum(len(group) for group in load_rollout(template, 0, subsample=0.01).groups) == 1
    assert load_rollout(template, 0).groups == groups
