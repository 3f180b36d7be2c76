"""slime's rollout-buffer, evaluation and reward-logging flags through one ``slime run`` (FSDP, the
CPU engine, Ray): it trains on what a rollout buffer speaking slime's HTTP API serves
(``--rollout-buffer-url``), and evaluates an ``--eval-config`` YAML whose datasets have their own
keys, lengths, sampling and reward, with the ``--eval-*`` flags they fall back to,
``--skip-eval-before-train``, ``--eval-reward-key`` and ``--log-reward-category``."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from slime_core import hookimpl

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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


class _Buffer(BaseHTTPRequestHandler):
    """slime's rollout buffer API (slime_plugins/rollout_buffer/buffer.py): ``/start_rollout``
    takes the task, ``/get_rollout_data`` answers ``success: false`` until the task came and
    once more, then two batches of trajectories at a time: groups of 8 ``1+1=`` conversations
    with a dict reward (``digits`` 1 when the answer is ``2``, and a category), plus an old group
    the rollout leaves out."""

    starts: list = []
    asks = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/start_rollout":
            _Buffer.starts.append(body)
            self._answer({"message": "Rollout started"})
            return
        _Buffer.asks += 1
        if not _Buffer.starts or _Buffer.asks == 1:
            self._answer({"success": False, "message": "No data available to read", "data": {"data": []}})
            return
        items = [self._item(g, i) for g in range(9) for i in range(8)]
        meta = {"total_samples": 100, "avg_reward": 0.25, "finished_groups": []}
        self._answer({"success": True, "message": "ok", "data": {"data": items, "meta_info": meta}})

    def _item(self, group, index):
        answer = "2" if index % 2 else "3"
        return {
            "uid": f"{_Buffer.asks}-{group}-{index}",
            "instance_id": f"{_Buffer.asks}-{group}",
            "messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": answer}],
            "reward": {"digits": float(answer == "2"), "cat": "right" if answer == "2" else "wrong"},
            "extra_info": {"timestamp": 1000.0 - group, "finish_reason": "length" if index == 7 else "stop"},
        }

    def _answer(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        """Quiet."""


def eval_config(tmp_path):
    """Two datasets: ``quiz`` with its own keys, samples, minimum length and stop tokens, and
    ``plain``, which takes the ``--eval-*`` flags (and has one prompt over ``--eval-max-prompt-len``)."""
    quiz = write_jsonl(tmp_path / "quiz.jsonl", [{"question": f"{a}+1=", "answer": str(a + 1)} for a in range(3)])
    long = {"q": "1+1+1+1=", "a": "4"}  # 8 tokens
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"q": "3+3=", "a": "6"}, {"q": "12+34=", "a": "46"}, long])
    config = tmp_path / "eval.yaml"
    config.write_text(
        "eval:\n"
        "  defaults: {max_response_len: 8}\n"
        "  datasets:\n"
        f"    - {{name: quiz, path: {quiz}, input_key: question, label_key: answer, n_samples_per_eval_prompt: 2,\n"
        f"       min_new_tokens: 6, stop_token_ids: {list(range(4, 80))}, metadata_overrides: {{split: test}}}}\n"
        f"    - {{name: plain, path: {plain}}}\n"
    )
    return config


def test_a_run_trains_on_a_rollout_buffer_and_evaluates_an_eval_config(slime_run, tmp_path):
    _Buffer.starts, _Buffer.asks, _Plugin.evaluations = [], 0, {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Buffer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    flags = ["--rollout-buffer-url", url, "--rollout-task-type", "count", "--reward-key", "digits"]
    flags += ["--rm-type", "digit_dict", "--eval-reward-key", "eval_score", "--log-reward-category", "cat"]
    flags += ["--eval-config", str(eval_config(tmp_path)), "--eval-input-key", "q", "--eval-label-key", "a"]
    flags += ["--eval-max-prompt-len", "6", "--eval-max-context-len", "10", "--eval-interval", "2"]
    try:
        records = slime_run("--num-rollout", "2", *flags, "--skip-eval-before-train", hooks=[_Plugin])
    finally:
        server.shutdown()
        server.server_close()

    # the rollout buffer: told once, before the first rollout; each rollout trains on its 8 newest groups of 9
    assert len(_Buffer.starts) == 1
    start = _Buffer.starts[0]
    assert start["task_type"] == "count" and start["num_repeat_per_sample"] == "8" and start["remote_buffer_url"] == url
    assert start["input_file"] == slime_run.base[1] and start["remote_engine_url"].startswith("http://")
    for record in records:
        assert record["rollout/samples"] == 64 and record["rollout/reward_mean"] == 0.5  # --reward-key digits
        assert record["rollout/response_length_mean"] == 3  # the answer, EOS and newline: the assistant's turn
        assert record["rollout/truncated_fraction"] == 1 / 8
        assert record["rollout/no_filter/total_samples"] == 100 and record["rollout/no_filter/avg_reward"] == 0.25
        assert record["rollout/error_cat/right"] == 0.5 and record["rollout/error_cat/wrong"] == 0.5
        assert record["train/grad_norm"] > 0 and record["weight_version"] > 0  # trained on its advantages

    # the evaluation: none before training (--skip-eval-before-train), one after the last rollout
    assert list(_Plugin.evaluations) == [1]
    groups = _Plugin.evaluations[1]
    quiz_samples = [s for group in groups["quiz"] for s in group]
    assert [len(group) for group in groups["quiz"]] == [2, 2, 2] and quiz_samples[0].label == "1"
    assert all(s.metadata["split"] == "test" for s in quiz_samples)
    # min_new_tokens 6 holds back the stop tokens (most of the vocabulary), and 10 - 4 prompt tokens end it
    assert [s.response_length for s in quiz_samples] == [6] * 6
    plain_samples = [s for group in groups["plain"] for s in group]
    assert [(s.prompt, s.label) for s in plain_samples] == [("3+3=", "6"), ("12+34=", "46")]  # one dropped
    assert all(len(s.tokens) <= 10 for s in plain_samples)  # --eval-max-context-len
    metrics = records[1]
    assert metrics["eval/quiz/reward_mean"] == 2.0 and metrics["eval/plain/reward_mean"] == 2.0  # eval_score
    shares = {k: v for k, v in metrics.items() if k.startswith("eval/quiz/error_cat/")}
    assert set(shares) <= {"eval/quiz/error_cat/some_digits", "eval/quiz/error_cat/no_digits"}
    assert sum(shares.values()) == pytest.approx(1)
