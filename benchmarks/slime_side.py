"""slime's side of ``benchmarks/trl_vs_slime.py``: ``slime run`` in a subprocess, its step
times and phases from metrics.jsonl, and CPU seconds per step of its processes by role."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from grpo_benchmark import IDLE, SLIME, Result, Setup, eval_model_dir, read_jsonl, run


class CpuSampler:
    """CPU seconds of this machine's processes summed by role, sampled from /proc every
    ``period`` seconds in a thread: ``samples`` holds (wall time, {role: seconds})."""

    ROLES = {
        "train rank": ("ray::RankProcess",),
        "engine": ("engine serve", "slime_vllm.serve", "VLLM::"),  # CPU engine; vLLM's API server and engine core
        "driver": ("slime run",),
        "sglang-router": ("sglang::router",),
        "Ray's processes": ("ray/", "ray::"),
    }  # first match wins

    def __init__(self, period: float = 0.5):
        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(self.period):
            totals = dict.fromkeys(self.ROLES, 0.0)
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:  # gone meanwhile
                    continue
                role = next((r for r, patterns in self.ROLES.items() if any(p in command for p in patterns)), None)
                if role:
                    totals[role] += (int(fields[11]) + int(fields[12])) / tick
            self.samples.append((time.time(), totals))

    def per_step(self, begin: float, end: float, steps: int) -> dict[str, float]:
        """Mean CPU seconds per step by role between wall times ``begin`` and ``end``, from the
        samples that enclose them (a few short steps may hold no sample of their own)."""
        before = [sample for sample in self.samples if sample[0] <= begin] or self.samples[:1]
        after = [sample for sample in self.samples if sample[0] >= end] or self.samples[-1:]
        (t0, first), (t1, last) = before[-1], after[0]
        scale = (end - begin) / max(t1 - t0, 1e-9) / max(steps, 1)  # the samples span a little more than the steps
        return {role: (last[role] - first[role]) * scale for role in self.ROLES}


def run_slime(init: Path, workdir: Path, setup: Setup) -> Result:
    """``slime run`` of the quickstart's GRPO config for ``setup.steps`` rollouts, evaluated
    (by slime, too) before the first and after the last, saving the final weights."""
    out = workdir / "slime"
    shutil.rmtree(out, ignore_errors=True)  # a run left from an earlier call would be appended to
    start = time.perf_counter()
    with CpuSampler() as sampler:
        slime_command(init, out, setup)
    wall = time.perf_counter() - start
    records = read_jsonl(out / "metrics.jsonl")
    evals_and_saves = sum(r.get("time/eval", 0.0) + r.get("time/save", 0.0) for r in records)
    result = Result("slime", total_seconds=wall - evals_and_saves)
    slime_step_times(records, result, setup.slime_train_mode)
    # the last step ends with the final eval and save; a run of 3 steps or fewer has no steady middle
    steady = records[1:-1] if len(records) > 3 else records
    result.cpu = sampler.per_step(steady[0]["time"], steady[-1]["time"], len(steady) - 1)
    result.rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r][-5:]
    result.eval_after = [eval_model_dir(sorted((out / "hf").glob("iter_*"))[-1], setup)]
    own = [r[f"eval/{setup.eval_name}/reward_mean"] for r in records if f"eval/{setup.eval_name}/reward_mean" in r]
    if own:
        result.notes.append(f"slime's own eval (its engine, greedy): {own[0]:.3f} before, {own[-1]:.3f} after")
    return result


def slime_command(init: Path, out: Path, setup: Setup) -> None:
    run(
        SLIME,
        "run",
        *setup.slime_config,
        "--hf-checkpoint",
        str(init),
        "--output-dir",
        str(out),
        "--num-rollout",
        str(setup.steps),
        *(("--eval-interval", str(setup.steps)) if setup.eval_name else ()),
        "--rollout-batch-size",
        str(setup.prompts_per_step),
        "--n-samples-per-prompt",
        str(setup.group_size),
        "--global-batch-size",
        str(setup.samples_per_step),
        "--lr",
        str(setup.lr),
        "--rollout-max-response-len",
        str(setup.max_response_len),
        "--rollout-temperature",
        str(setup.temperature),
        "--seed",
        str(setup.seed),
        "--rollout-seed",
        str(setup.seed),
        "--save",
        str(out / "checkpoints"),
        "--save-interval",
        str(setup.steps),
        "--save-hf",
        str(out / "hf"),
        "--train-mode",
        setup.slime_train_mode,
    )


def slime_step_times(records: list[dict], result: Result, train_mode: str = "sync") -> None:
    """Step wall time = time between consecutive metrics records, less the evaluation and
    checkpoint that some steps end with; `IDLE` = what generation (incl. reward), training
    and the weight push leave of it (the driver between phases, waiting on the engine or rank). In async mode
    generation overlaps training,
    and the step waits for it only for what is left (``time/wait_rollout``)."""
    generation = (
        ("generation + reward", "time/rollout")
        if train_mode == "sync"
        else ("waiting for generation", "time/wait_rollout")
    )
    phases = {generation[0]: generation[1], "training": "time/train", "weight sync": "time/weight_update"}
    sums = dict.fromkeys([*phases, IDLE], 0.0)
    for previous, record in zip(records, records[1:]):
        wall = record["time"] - previous["time"] - record.get("time/eval", 0.0) - record.get("time/save", 0.0)
        result.step_seconds.append(wall)
        for name, key in phases.items():
            sums[name] += record.get(key, 0.0)
        sums[IDLE] += wall - sum(record.get(key, 0.0) for key in phases.values())
    result.phases = {name: total / len(result.step_seconds) for name, total in sums.items()}
