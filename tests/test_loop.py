"""`slime run` end to end on CPU: FSDP train ranks and CPU engines as Ray actors, the real
sglang-router, weight updates every rollout, and a reward the tiny model learns in a few steps."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from slime_core.loop.run_dir import read_metrics
from slime_core.rollout.metrics import drop_stale_groups
from slime_core.sample import Sample
from slime_core.testing import alive, command_line

pytestmark = pytest.mark.integration


def improved(records) -> bool:
    rewards = [r["rollout/reward_mean"] for r in records]
    return sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02


def test_sync_colocated_run_learns_and_fills_its_run_directory(slime_run, tmp_path):
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(6)))
    records = slime_run(
        "--num-rollout",
        "6",
        "--colocate",
        "--check-weight-update-equal",
        "--dump-rollouts",
        "--eval-prompt-data",
        "small",
        str(eval_data),
        "--eval-interval",
        "3",
    )
    assert [r["rollout_id"] for r in records] == list(range(6))
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    last = records[-1]
    assert last["weight_version"] == 6 and last["weight_update/bytes"] > 0
    assert last["weight_update/max_logprob_diff"] < 1e-3  # the engines got exactly the trainer's weights
    assert last["train/train_rollout_logprob_abs_diff"] < 1e-3
    assert {"eval/small/reward_mean", "time/eval"} <= set(records[2]) and "eval/small/reward_mean" not in records[3]
    run_dir = tmp_path / "run"
    assert "rollout_batch_size: 8" in (run_dir / "config.yaml").read_text()
    plugins = {p["distribution"] for p in json.loads((run_dir / "plugins.json").read_text())}
    assert {"slime-core", "slime-fsdp", "slime-sglang", "slime-router"} <= plugins
    dumped = [json.loads(line) for line in (run_dir / "rollouts" / "rollout_000005.jsonl").read_text().splitlines()]
    assert len(dumped) == 64 and all(len(s["loss_mask"]) == s["response_length"] for s in dumped)
    assert sum(s["reward"] for s in dumped) / 64 == pytest.approx(last["rollout/reward_mean"])
    log = (run_dir / "slime.log").read_text()
    assert "[rollout 6/6]" in log and "placement: 1 bundles (1 training ranks, engines sharing" in log


@pytest.mark.slow
def test_grpo_with_lora_raises_the_greedy_eval_and_the_engines_merge_the_pushed_adapter(
    slime_run, tmp_path, tiny_model_dir
):
    """``--lora-rank``: each sync pushes the adapter alone (its bytes, not the model's) and the CPU
    engine merges it into its base, so its log-probs equal the trainer's after every push; the
    greedy eval reward rises (0.0 -> 1.0 here). The adapter alone trains, so the sampled reward
    moves more slowly than with full fine-tuning; test_fsdp_backend.py's LoRA test checks that
    GRPO raises a rewarded token's probability."""
    from torch import nn
    from transformers import AutoModelForCausalLM

    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+2=", "label": str(a + 2)}) + "\n" for a in range(8)))
    records = slime_run(
        *("--num-rollout", "6", "--lora-rank", "8", "--lora-alpha", "16", "--lr", "2e-2"),
        *("--check-weight-update-equal", "--eval-prompt-data", "small", str(eval_data), "--eval-interval", "6"),
        *("--eval-temperature", "0"),
    )
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    before = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    curve = [before["eval/small/reward_mean"], records[-1]["eval/small/reward_mean"]]
    assert curve[1] > curve[0], curve
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    linears = [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and name != "lm_head"]
    adapter = sum(8 * (m.in_features + m.out_features) * 4 + 8 for m in linears)  # float32 A and B, float64 scaling
    merged = sum(p.numel() * 4 for p in model.parameters())
    sent = {r["weight_update/bytes"] for r in records}
    assert len(sent) == 1 and adapter < sent.pop() < 1.1 * adapter < merged / 4, (sent, adapter, merged)
    assert "LoRA: weight syncs (tensor) send the adapter alone" in (tmp_path / "run" / "slime.log").read_text()


def test_async_run_learns_with_one_version_of_staleness(slime_run):
    """Disaggregated: the weights reach the engine by a gloo broadcast from the driver."""
    records = slime_run(
        "--num-rollout", "6", "--async", "--max-staleness", "1", "--update-weight-transport", "broadcast"
    )
    assert improved(records), [r["rollout/reward_mean"] for r in records]
    # A sample reports the weights that finished it: generated while the previous rollout
    # trained, it is one version behind, or none when it finished after that weight update.
    staleness = [r["rollout/staleness_max"] for r in records]
    assert staleness[0] == 0 and set(staleness[1:]) <= {0, 1} and 1 in staleness[1:], staleness
    assert all(r["rollout/stale_groups_dropped"] == 0 for r in records)
    assert all("time/wait_rollout" in r for r in records)
    assert records[-1]["weight_version"] == 6 and records[-1]["weight_update/bytes"] > 0
    log = (slime_run.tmp_path / "run" / "slime.log").read_text()
    assert "placement: 2 bundles (1 training ranks, engines one bundle per engine)" in log
    # The start-up timeline: each part once, in the order it became ready (ranks, engines and
    # the router start side by side, so those three may come in any order; the router is
    # given the engines once both are up).
    events = [line.split("s  ", 1)[1] for line in log.splitlines() if line.startswith("start-up ")]
    assert events[:2] == ["Ray up", "placement reserved"]
    assert sorted(events[2:6]) == ["engines healthy", "engines routed", "router ready", "train ranks loaded"]
    assert events.index("engines routed") > max(events.index("engines healthy"), events.index("router ready"))
    assert events[6:] == ["first rollout submitted", "first rollout generated"]
    seconds = [float(line.split()[1].rstrip("s")) for line in log.splitlines() if line.startswith("start-up ")]
    assert seconds == sorted(seconds)


def test_over_sampling_with_a_filter_and_partial_rollout_abort_every_engine_behind_the_router(slime_run):
    """Once the batch is full, the rest is aborted on each engine (sglang-router forwards
    generation, not /abort_request, which it answered with 404), and with --partial-rollout the
    aborted groups come back first in the next rollout. With two data-parallel train ranks, the
    weight check gives each rank a probe (one probe group could not feed two ranks)."""
    records = slime_run(
        "--num-rollout",
        "3",
        "--over-sampling-batch-size",
        "12",
        "--rollout-concurrency",
        "16",
        "--dynamic-sampling-filter",
        "nonzero_std",
        "--partial-rollout",
        "--actor-num-gpus-per-node",
        "2",
        "--check-weight-update-equal",
    )
    assert all(r["rollout/samples"] == 64 for r in records)  # exactly the batch, every time
    assert sum(r["rollout/groups_aborted"] for r in records) > 0
    assert all(r["rollout/groups_submitted"] >= 8 for r in records)
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)


def test_groups_beyond_the_staleness_bound_are_dropped_and_counted():
    fresh, old = [Sample(weight_versions=[4, 5])], [Sample(weight_versions=[2, 5])]
    kept, dropped = drop_stale_groups([fresh, old, fresh], version=5, max_staleness=2)
    assert kept == [fresh, fresh] and dropped == 1
    assert drop_stale_groups([old], version=5, max_staleness=None) == ([old], 0)


def test_model_data_checkpoint_and_loss_mistakes_are_reported_before_anything_starts(tmp_path, tiny_model_dir):
    """What a train rank or the data source would hit ~40 s in, as a traceback from a Ray actor,
    is reported at once with the other config errors: a bad prompt line (file:line), a model
    directory without config.json, a --load that does not exist, a dual-clip bound that is not
    > 1, and --kl-coef with an estimator that has no per-token reward to put it in."""
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n{"prompt": "2+2=", "label": "4"}\n{"question": "3+3="}\n')
    (tmp_path / "not-a-model").mkdir()
    command = [
        sys.executable,
        "-m",
        "slime_core.cli.main",
        "run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--ref-load",
        str(tmp_path / "not-a-model"),
        "--load",
        str(tmp_path / "nowhere"),
        "--eps-clip-c",
        "0.5",
        "--kl-coef",
        "0.1",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--rollout-batch-size",
        "2",
        "--num-rollout",
        "1",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    for expected in (
        f"{data}:3: no 'prompt' key",
        "--ref-load",
        "has no config.json",
        "--load",
        "does not exist",
        "eps_clip_c",
        "--kl-coef 0.1",
        "--advantage-estimator grpo does not use",
    ):
        assert expected in done.stderr, (expected, done.stderr)
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_bad_configs_fail_before_any_process_starts_with_every_error(tmp_path, tiny_model_dir):
    command = [
        sys.executable,
        "-m",
        "slime_core.cli.main",
        "run",
        "--prompt-data",
        str(tmp_path / "missing.jsonl"),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        "2",
        "--global-batch-size",
        "4",
        "--rm-type",
        "no_such_reward",
        "--train-backend",
        "no_such_backend",
        "--num-rollout",
        "2",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    for expected in ("missing.jsonl", "--global-batch-size 4", "no_such_reward", "no_such_backend"):
        assert expected in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()  # nothing was started or written


@pytest.mark.parametrize(
    "backend",
    [
        ("--train-backend", "fsdp", "--actor-num-gpus-per-node", "2"),  # two data-parallel ranks
        ("--train-backend", "megatron", "--actor-num-gpus-per-node", "2", "--tensor-model-parallel-size", "2"),
    ],
    ids=["fsdp-dp2", "megatron-tp2"],
)
def test_a_rerun_and_a_resume_give_bit_identical_metrics(slime_run, tmp_path, backend):
    """Same prompts in the same order (the data source's state), same weights and optimizer,
    same sampling (per-sample seeds), and the batch in prompt order whatever order the groups
    finished in, so each of the two optimizer steps per rollout takes the same samples on every
    rank; weights reach the engines through a directory here. The resume starts from the first
    of the whole run's two checkpoints (``--ckpt-step 0``; the latest would leave nothing to run)."""
    flags = ("--update-weight-transport", "disk", "--num-steps-per-rollout", "2", *backend)
    whole = slime_run(
        "--num-rollout", "2", "--save-interval", "1", "--save", str(tmp_path / "ckpt"), *flags, output="whole"
    )
    first = slime_run("--num-rollout", "1", *flags, output="first")
    resumed = slime_run(
        "--num-rollout", "2", "--load", str(tmp_path / "ckpt"), "--ckpt-step", "0", *flags, output="second"
    )
    assert [r["rollout_id"] for r in resumed] == [1]
    # The engine's own log-probs (only compared, not trained on, here) vary at the 1e-8 level with
    # which requests the CPU engine happens to decode together; everything else must not move at all.
    engine_side = "train/train_rollout_logprob_abs_diff"
    learned = [
        key
        for key in whole[1]
        if key.startswith(("train/", "rollout/reward", "rollout/response")) and key != engine_side
    ]
    assert "train/grad_norm" in learned and "train/loss" in learned
    for again, original in ((first[0], whole[0]), (resumed[0], whole[1])):  # the rerun, the resume
        assert {key: again[key] for key in learned} == {key: original[key] for key in learned}
        assert again[engine_side] < 1e-6 and original[engine_side] < 1e-6  # float noise both times


def delta_flags(encoding: str, local) -> tuple[str, ...]:
    return (
        "--update-weight-mode",
        "delta",
        "--update-weight-delta-encoding",
        encoding,
        "--update-weight-local-checkpoint-dir",
        str(local),
        "--check-weight-update-equal",
    )


def assert_delta_synced(records, run_dir, local, encoding: str) -> None:
    """Version 1 full, version 2 the diff, both loaded intact (`--check-weight-update-equal`);
    the engine host's copy at version 2, version 1 deleted once pulled."""
    assert all(r["weight_update/max_logprob_diff"] < 1e-3 for r in records)
    first, second = records
    assert first["weight_update/bytes"] >= first["weight_update/full_bytes"]  # version 1 is full
    if encoding == "xor":  # overwrite costs 5 bytes per changed byte, and a step changes most float32 bytes
        assert second["weight_update/bytes"] < second["weight_update/full_bytes"]  # version 2 is the diff
    assert json.loads((local / "pulled_version.json").read_text())["version"] == "000002"
    published = run_dir / "weights"
    index = json.loads((published / "weight_v000002" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["delta_encoding"] == encoding and index["metadata"]["compression_format"] == "zstd"
    assert [p.name for p in published.iterdir()] == ["weight_v000002"]


@pytest.mark.slow
def test_delta_weight_sync_gives_the_engines_the_trainers_weights(slime_run, tmp_path):
    """``--update-weight-mode delta``, xor: the first update is a full version, the second only
    the changed bytes, applied into the engine host's local copy, which the engine then loads
    (the overwrite encoding: the true on-policy run below)."""
    local = tmp_path / "engine-host-copy"
    records = slime_run("--num-rollout", "2", *delta_flags("xor", local))
    assert_delta_synced(records, tmp_path / "run", local, "xor")


@pytest.mark.slow
def test_true_on_policy_mode_makes_rollout_and_training_log_probs_equal(slime_run, tmp_path):
    """``--true-on-policy-mode``: the CPU engine decodes 64 samples together but reports each
    sequence's log-probs from a forward pass of it alone, and the FSDP trainer (two ranks) runs
    each sample alone: the same numbers, so the gap is 0, not float noise, and so is the first
    step's KL between the old and the current policy; after a weight update as well, which
    arrives here as an overwrite delta (so the second rollout's 0 also says it arrived bit for bit)."""
    local = tmp_path / "engine-host-copy"
    flags = ("--true-on-policy-mode", "--actor-num-gpus-per-node", "2", *delta_flags("overwrite", local))
    records = slime_run("--num-rollout", "2", *flags)
    assert [r["train/train_rollout_logprob_abs_diff"] for r in records] == [0.0, 0.0]
    assert records[0]["train/ppo_kl"] == 0.0
    assert_delta_synced(records, tmp_path / "run", local, "overwrite")


STOPPER = """
import json, os, signal, threading
from slime_core import hookimpl
from slime_core.testing import descendants

armed = threading.Event()

def _stop():
    with open(os.environ["STOP_RECORD"], "w") as out:
        json.dump(descendants(os.getpid()), out)
    os.kill(os.getpid(), getattr(signal, os.environ["STOP_SIGNAL"]))

def stop_while_scoring(sample, config):
    # scored during the rollout, while other groups are still generating
    if armed.is_set():
        armed.clear()
        _stop()
    return 0.0

@hookimpl
def slime_register_reward_functions(register):
    register("stop_while_scoring", stop_while_scoring)

@hookimpl
def slime_before_rollout(rollout_id, config):
    if os.environ["STOP_PHASE"] == "rollout" and rollout_id == 1:
        armed.set()

@hookimpl
def slime_before_train_step(rollout_id, step):
    if os.environ["STOP_PHASE"] == "training" and rollout_id == 1:
        threading.Timer(0.05, _stop).start()
"""


@pytest.mark.parametrize("stop_signal,phase", [("SIGINT", "rollout"), ("SIGINT", "training"), ("SIGKILL", "training")])
def test_a_stopped_run_leaves_no_process_behind_and_a_resumable_checkpoint(
    request, monkeypatch, tmp_path, tiny_model_dir, stop_signal, phase
):
    """Stopped in rollout 1 by Ctrl-C, while generating or while training, `slime run` shuts
    its engines, router, train ranks and Ray down: no process it started outlives it; the
    checkpoint of rollout 0 is complete and a run resumes from it (a scheduler's SIGTERM
    takes the same path: next test). Killed outright (SIGKILL), its engines, router and
    train ranks still die with it (Ray's two agents exit on their own within about a
    minute, so they are not counted)."""
    import shutil
    import tempfile

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(50)))
    (tmp_path / "stopper.py").write_text(STOPPER)
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 108 bytes
    record = tmp_path / "processes.json"
    env = dict(
        os.environ,
        HOME=ray_dir,
        RAY_TMPDIR=ray_dir,
        PYTHONPATH=str(tmp_path),
        STOP_SIGNAL=stop_signal,
        STOP_PHASE=phase,
        STOP_RECORD=str(record),
    )
    flags = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "stop_while_scoring",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "2",
        "--rollout-max-response-len",
        "4",
        "--save-interval",
        "1",
        "--save",
        str(tmp_path / "ckpt"),
    ]
    command = [sys.executable, "-m", "slime_core.cli.main", "run", *flags, "-p", "stopper"]
    try:
        stopped = subprocess.run(
            [*command, "--num-rollout", "20", "--output-dir", str(tmp_path / "run")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=_interruptible,
        )
        assert stopped.returncode == (-9 if stop_signal == "SIGKILL" else 130), stopped.stderr[-2000:]
        started = json.loads(record.read_text())
        assert len(started) >= 3  # Ray's processes, the train rank, the engine and the router at least
        ray_agents = ("ray::DashboardAgent", "ray::RuntimeEnvAgent") if stop_signal == "SIGKILL" else ()
        assert _left_running(started, ray_agents, within_s=5 if stop_signal == "SIGKILL" else 2) == []
        assert (tmp_path / "ckpt" / "rollout_state" / "iter_0000000.json").is_file()
        assert not (tmp_path / "ckpt" / "rollout_state" / "iter_0000001.json").exists()
        if (stop_signal, phase) == ("SIGINT", "training"):
            request.getfixturevalue("ray_cluster")  # resumed on this session's Ray: the stop is what is tested above
            monkeypatch.setenv("STOP_PHASE", "none")
            _run_here(
                [
                    *flags,
                    "--load",
                    str(tmp_path / "ckpt"),
                    "--num-rollout",
                    "2",
                    "--output-dir",
                    str(tmp_path / "resumed"),
                ],
                tmp_path / "stopper.py",
            )
            lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
            assert [json.loads(line)["rollout_id"] for line in lines] == [1]
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def _run_here(flags: list[str], plugin_file) -> None:
    """``slime run FLAGS`` in this process, with the hooks of ``plugin_file`` registered."""
    import importlib.util

    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins

    spec = importlib.util.spec_from_file_location(plugin_file.stem, plugin_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plugins = Plugins()
    plugins.register_object(plugin_file.stem, module)
    try:
        assert run_command(flags, plugins) == 0
    finally:
        plugins.unregister(plugin_file.stem)


def test_sigterm_unwinds_like_ctrl_c_while_the_loop_runs():
    """SIGTERM raises KeyboardInterrupt inside the loop (so the stop above applies to it), and
    the handler that was there before (Ray's) is back afterwards."""
    from slime_core.loop.driver import _sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), _sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    assert signal.getsignal(signal.SIGTERM) is before


def _left_running(pids, ignored: tuple[str, ...], within_s: float) -> list[str]:
    """The command lines of ``pids`` still running ``within_s`` seconds from now (those starting
    with ``ignored`` not counted); returns as soon as none is."""
    deadline = time.monotonic() + within_s
    while True:
        running = [command_line(pid) for pid in pids if alive(pid) and not command_line(pid).startswith(ignored)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def _interruptible() -> None:
    """In the child, before exec: SIGINT back to its default, which Python turns into
    KeyboardInterrupt (a shell running the tests in the background passes SIGINT ignored)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_external_engines_get_the_trainer_s_weights_before_the_first_rollout(slime_run, tmp_path):
    """An engine the run did not start serves whatever it was last given (here: another random
    model of the same shape); as in THUDM slime the trainer's weights reach it before the first
    rollout, so that rollout's engine log-probs are the trainer's."""
    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    process, url = start_cpu_engine(build_tiny_qwen3(tmp_path / "other", seed=3), None, "--num-threads", "1")
    try:
        wait_healthy(process, url)
        records = slime_run("--num-rollout", "1", "--rollout-external-engine-addrs", url.removeprefix("http://"))
    finally:
        stop(process)
    assert records[0]["train/train_rollout_logprob_abs_diff"] < 1e-3
    assert "first weights pushed" in (tmp_path / "run" / "slime.log").read_text()
