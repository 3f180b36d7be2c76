"""slime against TRL's GRPOTrainer: wall time per step, where it goes, and the eval reward after
N steps, on CPU, on one of two tasks:

- ``--task quickstart`` (default): the quickstart's 0.8 M-parameter model on addition, answers
  of 1-2 tokens (20 steps of 32 prompts × 8);
- ``--task counting``: a 25.2 M-parameter Qwen3 counting out ranges (benchmarks/counting_task.py),
  answers from 1 to 250 tokens, long-tailed (median 25, mean 49): 10 steps of 4 prompts × 8,
  lr 5e-5, up to 256 new tokens. Here static batches waste the most: TRL generates every group
  of a step until its longest answer ends and trains on the padded batch, while slime's CPU
  engine batches continuously and its FSDP rank trains on packed rows.

    .venv/bin/python benchmarks/trl_vs_slime.py [--task quickstart|counting] [--steps 20] [--quick]
                                                [--rounds 2] [--seed 1234] [--init HF_DIR] [--workdir DIR]
                                                [--slime-train-mode sync|async]

Needs TRL, for this benchmark only (not in the dev setup or CI); this pin leaves torch and
transformers as they are and adds no nvidia packages:

    uv pip install -p .venv/bin/python "trl==1.16.0"

Both sides start from the same weights: the task's model (`slime tiny-model`) after its
supervised warm-up (quickstart: examples/quickstart/sft_warmup.yaml; counting:
`counting_task.sft_flags`), made once in the workdir and reused (``--init`` gives one, e.g.
runs/quickstart/sft/hf/iter_0000299 from examples/quickstart/run.sh). Then N steps of GRPO on
the task's training prompts with the exact-match reward, the same group size, prompts per
step, learning rate (constant), response length, temperature, clip range, no KL term,
per-sample loss averaging and one optimizer step per rollout:

- slime: ``slime run examples/quickstart/grpo_addition.yaml`` (counting: `counting_task.grpo_flags`;
  FSDP train rank and the CPU
  engine as Ray actors, weights pushed to the engine after every step), in a subprocess;
  its timings come from metrics.jsonl.
- TRL: ``GRPOTrainer`` in this process (the policy model generates with ``generate``, so
  there is no weight sync); its phases are timed by wrapping the trainer's methods and with
  a callback.

Step time is each step's wall time (slime: between two metrics records, less the final eval
and save; TRL: between two optimizer steps). Both train with one torch thread per core
(slime's single FSDP rank, like TRL's process, takes them all); slime's Ray workers get TRL's process priority
(`SAME_PRIORITY`). On a machine shared with other work the figures swing with its load:
``--rounds`` alternates which side goes first.

CPU seconds per step: on a 2-core machine both sides are CPU-bound, so where the CPU goes
says more than the wall clock. slime's parts are Ray workers and servers, not children of
this process: a sampler reads every process's CPU time from /proc twice a second and sums it
by role (train rank, engine, driver, sglang-router, Ray's own processes) over the steps
between the first and the last metrics record; TRL's is this process's CPU time per step.

Eval reward: greedy exact-match accuracy on the task's held-out prompts (quickstart: the 200
of examples/quickstart/data/addition_eval.jsonl; counting: the first 100 of its 200), measured the same way (transformers
``generate``) on the starting weights and on each side's weights after N steps.

Counting, 2026-11-25, from the warm-up's step-200 weights, one round each on 2 cores shared
with other engineers' test runs (the load moved under them, so the two runs disagree):

    .venv/bin/python benchmarks/trl_vs_slime.py --task counting --quick --init runs/bench-counting/sft/hf/iter_0000199
    .venv/bin/python benchmarks/trl_vs_slime.py --task counting --steps 5 --init runs/bench-counting/sft/hf/iter_0000199

--quick (2 prompts × 8, 3 steps, load 3.5-4.2): slime 7.2 s/step (generation 2.8, training 3.6,
weight sync 0.8) vs TRL 56.5 s (generation 35.0, training 21.2); 7.9 vs 42.8 CPU-s per step.
--steps 5 (4 prompts × 8; slime at load 8-16, TRL at ~3): slime 25.8 s/step (generation 4.7,
training 20.0, weight sync 1.1) vs TRL 16.3 s (generation 7.0, training 9.3); 19.7 vs 28.0
CPU-s per step. Greedy eval 0.000 before on both sides, 0.000 (slime) / 0.030 (TRL) after 5
steps: this warm-up's greedy answers are all wrong, sampled ones sometimes right.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import counting_task  # benchmarks/counting_task.py, next to this script

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
SLIME = os.environ.get("SLIME", str(Path(sys.executable).with_name("slime")))  # as examples/quickstart/run.sh
TRL_INSTALL = f'uv pip install -p {sys.executable} "trl==1.16.0"'
#: Ray starts its workers (slime's train rank and engine) at nice 15; TRL runs in this process
#: at nice 0. On a machine shared with other work that alone would slow slime down several
#: times, so slime's workers get the same priority as TRL here.
SAME_PRIORITY = {"RAY_worker_niceness": "0"}
#: The phase of a step that is neither generation, training nor weight sync.
IDLE = "idle and overhead (the rest)"


@dataclass
class Setup:
    """What both sides train with (defaults: the quickstart's GRPO settings)."""

    steps: int = 20
    prompts_per_step: int = 32  # --rollout-batch-size; TRL: generation batch / num_generations
    group_size: int = 8  # --n-samples-per-prompt; TRL: num_generations
    lr: float = 1e-4
    max_response_len: int = 8
    temperature: float = 1.0
    seed: int = 1234
    sft_rollouts: int = 300  # the warm-up, when --init is not given
    slime_train_mode: str = "sync"  # async: slime generates the next rollout while it trains on this one
    task: str = "quickstart"
    train_data: Path = QUICKSTART / "data" / "addition_train.jsonl"
    eval_data: Path = QUICKSTART / "data" / "addition_eval.jsonl"
    eval_prompts: int = 200  # the first N prompts of eval_data are evaluated
    eval_name: str | None = "addition"  # slime's own eval (eval/NAME/reward_mean) in the config; None: none
    slime_config: tuple[str, ...] = (str(QUICKSTART / "grpo_addition.yaml"),)  # before the shared flags
    model_flags: tuple[str, ...] = ()  # `slime tiny-model` flags of the model the warm-up starts from
    sft_config: tuple[str, ...] = (str(QUICKSTART / "sft_warmup.yaml"),)  # the warm-up's `slime run` config

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.group_size


@dataclass
class Result:
    """One side's measurements; ``phases`` are mean seconds per step."""

    name: str
    step_seconds: list[float] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    total_seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per step, by role
    rewards: list[float] = field(default_factory=list)  # mean training reward of the last 5 steps (of each round)
    eval_after: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- shared


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_rows(setup: Setup) -> list[dict]:
    return read_jsonl(setup.eval_data)[:setup.eval_prompts]


def exact_match(response: str, label: str) -> float:
    """The quickstart's reward (slime_rewards' ``exact_match``), on plain strings."""
    from types import SimpleNamespace

    from slime_rewards.functions import exact_match_reward

    return exact_match_reward(SimpleNamespace(response=response, label=label))


def greedy_accuracy(model, tokenizer, rows: list[dict], max_new_tokens: int) -> float:
    """Share of ``rows`` whose greedy answer matches the label exactly (one left-padded batch)."""
    import torch

    tokenizer.padding_side = "left"
    batch = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    model.eval()
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    answers = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return sum(exact_match(a, r["label"]) for a, r in zip(answers, rows)) / len(rows)


def load_model(path: Path):
    """The Hugging Face model in ``path``, decoding with its KV cache: slime's FSDP export
    (``--save-hf``) writes ``use_cache: false`` (its training setting) into the config and the
    generation config, and ``generate`` then recomputes the whole sequence for every new
    token (quadratic in the answer's length)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    model.config.use_cache = model.generation_config.use_cache = True
    return model


def eval_model_dir(path: Path, setup: Setup) -> float:
    from transformers import AutoTokenizer

    return greedy_accuracy(load_model(path), AutoTokenizer.from_pretrained(path), eval_rows(setup),
                           setup.max_response_len)


def parameter_count(path: Path) -> int:
    """Parameters of the Hugging Face model in ``path`` (tied embeddings counted once)."""
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env={**os.environ, **SAME_PRIORITY})


def warm_start(workdir: Path, setup: Setup) -> Path:
    """The task's model after its SFT warm-up (quickstart: as examples/quickstart/run.sh), made
    once per workdir and reused by later runs."""
    sft = workdir / "sft"
    if not list((sft / "hf").glob("iter_*")):
        run(SLIME, "tiny-model", str(workdir / "tiny-qwen3"), *setup.model_flags)
        run(SLIME, "run", *setup.sft_config, "--hf-checkpoint", str(workdir / "tiny-qwen3"),
            "--output-dir", str(sft), "--save", str(sft / "checkpoints"), "--save-hf", str(sft / "hf"),
            "--num-rollout", str(setup.sft_rollouts), "--save-interval", str(setup.sft_rollouts))
    return sorted((sft / "hf").glob("iter_*"))[-1]


def counting_setup(workdir: Path, quick: bool) -> Setup:
    """The counting task (benchmarks/counting_task.py): a 25 M-parameter Qwen3, answers of 1 to
    250 tokens, 4 prompts × 8 per step (--quick: 3 steps of 2 prompts), data written to ``workdir``.
    slime runs no eval of its own here, and this script evaluates the first 100 held-out prompts
    only: 256-token greedy answers cost minutes on 2 cores."""
    train, evaluation = counting_task.write_split(workdir / "data")
    return Setup(steps=3 if quick else 10, prompts_per_step=2 if quick else 4, lr=counting_task.GRPO_LR,
                 max_response_len=counting_task.MAX_RESPONSE_LEN, sft_rollouts=counting_task.SFT_ROLLOUTS, task="counting",
                 train_data=train, eval_data=evaluation, eval_prompts=100, eval_name=None,
                 slime_config=tuple(counting_task.grpo_flags(train)),
                 model_flags=counting_task.MODEL_FLAGS, sft_config=tuple(counting_task.sft_flags(train)))


# ---------------------------------------------------------------- slime


class CpuSampler:
    """CPU seconds of this machine's processes summed by role, sampled from /proc every
    ``period`` seconds in a thread: ``samples`` holds (wall time, {role: seconds})."""

    ROLES = {"train rank": ("ray::FSDPTrainRank",), "engine": ("engine serve",), "driver": ("slime run",),
             "sglang-router": ("sglang::router",), "Ray's processes": ("ray/", "ray::")}  # first match wins

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
    result = Result("slime", total_seconds=time.perf_counter() - start)
    records = read_jsonl(out / "metrics.jsonl")
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
    run(SLIME, "run", *setup.slime_config, "--hf-checkpoint", str(init), "--output-dir", str(out),
        "--num-rollout", str(setup.steps), *(("--eval-interval", str(setup.steps)) if setup.eval_name else ()),
        "--rollout-batch-size", str(setup.prompts_per_step), "--n-samples-per-prompt", str(setup.group_size),
        "--global-batch-size", str(setup.samples_per_step), "--lr", str(setup.lr),
        "--rollout-max-response-len", str(setup.max_response_len), "--rollout-temperature", str(setup.temperature),
        "--seed", str(setup.seed), "--rollout-seed", str(setup.seed), "--save", str(out / "checkpoints"), "--save-interval", str(setup.steps),
        "--save-hf", str(out / "hf"), "--train-mode", setup.slime_train_mode)


def slime_step_times(records: list[dict], result: Result, train_mode: str = "sync") -> None:
    """Step wall time = time between consecutive metrics records, less the evaluation and
    checkpoint that some steps end with; `IDLE` = what generation (incl. reward), training
    and the weight push leave of it (the driver between phases, waiting on the engine or rank). In async mode generation overlaps training,
    and the step waits for it only for what is left (``time/wait_rollout``)."""
    generation = ("generation + reward", "time/rollout") if train_mode == "sync" else ("waiting for generation", "time/wait_rollout")
    phases = {generation[0]: generation[1], "training": "time/train", "weight sync": "time/weight_update"}
    sums = dict.fromkeys([*phases, IDLE], 0.0)
    for previous, record in zip(records, records[1:]):
        wall = record["time"] - previous["time"] - record.get("time/eval", 0.0) - record.get("time/save", 0.0)
        result.step_seconds.append(wall)
        for name, key in phases.items():
            sums[name] += record.get(key, 0.0)
        sums[IDLE] += wall - sum(record.get(key, 0.0) for key in phases.values())
    result.phases = {name: total / len(result.step_seconds) for name, total in sums.items()}


# ---------------------------------------------------------------- TRL


class PhaseTimer:
    """Seconds spent in wrapped methods of one object, summed per phase name."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def wrap(self, obj, method: str, phase: str) -> None:
        inner = getattr(obj, method)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

        setattr(obj, method, timed)


def trl_step_callback(timer: PhaseTimer, result: Result):
    """A TrainerCallback recording each optimizer step's wall time (end to end, dataloader
    included) and the optimizer step itself."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.last = time.perf_counter()
            self.cpu_marks: list[float] = []  # this process's CPU seconds at each step's end

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer_start = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            timer.seconds["optimizer"] = timer.seconds.get("optimizer", 0.0) + time.perf_counter() - self.optimizer_start

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            result.step_seconds.append(now - self.last)
            self.last = now
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            self.cpu_marks.append(cpu.ru_utime + cpu.ru_stime)

    return StepClock()


def trl_config(workdir: Path, setup: Setup):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(workdir / "trl"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        max_steps=setup.steps, per_device_train_batch_size=setup.samples_per_step, gradient_accumulation_steps=1,
        num_generations=setup.group_size, max_completion_length=setup.max_response_len,
        temperature=setup.temperature, top_p=1.0, top_k=0, learning_rate=setup.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=0.0, num_iterations=1, epsilon=0.2,
        loss_type="grpo", scale_rewards="group", seed=setup.seed, logging_steps=1, dataloader_num_workers=0,
        disable_tqdm=True)


def run_trl(init: Path, workdir: Path, setup: Setup) -> Result:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    def reward(prompts, completions, label, **kwargs):
        return [exact_match(c, l) for c, l in zip(completions, label)]

    start = time.perf_counter()
    result, timer = Result("TRL"), PhaseTimer()
    tokenizer = AutoTokenizer.from_pretrained(init)
    clock = trl_step_callback(timer, result)
    trainer = GRPOTrainer(model=load_model(init), reward_funcs=reward,
                          args=trl_config(workdir, setup), processing_class=tokenizer,
                          train_dataset=Dataset.from_list(read_jsonl(setup.train_data)),
                          callbacks=[clock])
    timer.wrap(trainer, "_generate", "generation")
    timer.wrap(trainer, "_calculate_rewards", "reward")
    timer.wrap(trainer, "_generate_and_score_completions", "generate and score")
    timer.wrap(trainer, "training_step", "training step")
    trainer.train()
    result.total_seconds = time.perf_counter() - start
    marks = clock.cpu_marks
    result.cpu = {"TRL's process": (marks[-1] - marks[0]) / (len(marks) - 1)}
    result.phases = trl_phases(timer.seconds, sum(result.step_seconds), len(result.step_seconds))
    result.rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry][-5:]
    result.eval_after = [greedy_accuracy(trainer.model, tokenizer, eval_rows(setup), setup.max_response_len)]
    return result


def trl_phases(seconds: dict[str, float], wall: float, steps: int) -> dict[str, float]:
    """Mean seconds per step: generation, reward, training (scoring the completions' log-probs,
    loss, backward, optimizer), weight sync (none) and what is left (dataloader, logging)."""
    generation, reward = seconds.get("generation", 0.0), seconds.get("reward", 0.0)
    scoring = seconds.get("generate and score", 0.0) - generation - reward
    training = seconds.get("training step", 0.0) - seconds.get("generate and score", 0.0) + seconds.get("optimizer", 0.0)
    totals = {"generation + reward": generation + reward, "training": training + scoring, "weight sync": 0.0}
    totals[IDLE] = wall - sum(totals.values())
    return {name: value / steps for name, value in totals.items()} | {"  of which reward": reward / steps}


# ---------------------------------------------------------------- report


def table(results: list[Result], setup: Setup, eval_before: float) -> str:
    rows = [("steps", [str(len(r.step_seconds)) for r in results]),
            ("wall time per step, mean (s)", [f"{statistics.mean(r.step_seconds):.2f}" for r in results]),
            ("wall time per step, median (s)", [f"{statistics.median(r.step_seconds):.2f}" for r in results])]
    for phase in dict.fromkeys(phase for r in results for phase in r.phases):
        rows.append((f"  {phase}", [f"{r.phases[phase]:.2f}" if phase in r.phases else "-" for r in results]))
    rows.append(("CPU seconds per step, all processes", [f"{sum(r.cpu.values()):.2f}" for r in results]))
    for role in dict.fromkeys(role for r in results for role in r.cpu):
        rows.append((f"  {role}", [f"{r.cpu[role]:.2f}" if role in r.cpu else "-" for r in results]))
    rows += [("total wall incl. start-up and eval (s), mean", [f"{r.total_seconds:.1f}" for r in results]),
             (f"eval reward before (greedy, {len(eval_rows(setup))} prompts)",
              [f"{eval_before:.3f}"] * len(results)),
             ("training reward, mean of the last 5 steps", [f"{statistics.mean(r.rewards):.3f}" for r in results]),
             (f"eval reward after {setup.steps} steps", ["/".join(f"{e:.3f}" for e in r.eval_after) for r in results])]
    width, cell = max(len(name) for name, _ in rows), max(8, *(len(v) for _, values in rows for v in values))
    lines = [f"{'':{width}}  " + "  ".join(f"{r.name:>{cell}}" for r in results)]
    lines += [f"{name:{width}}  " + "  ".join(f"{v:>{cell}}" for v in values) for name, values in rows]
    return "\n".join(lines + [note for r in results for note in r.notes])


def merge(rounds: list[Result]) -> Result:
    """One side over several rounds: every step's time, mean phases and wall, each eval."""
    phases = {name: statistics.mean(r.phases[name] for r in rounds) for name in rounds[0].phases}
    cpu = {role: statistics.mean(r.cpu[role] for r in rounds) for role in rounds[0].cpu}
    return Result(rounds[0].name, [t for r in rounds for t in r.step_seconds], phases,
                  statistics.mean(r.total_seconds for r in rounds), cpu, [w for r in rounds for w in r.rewards],
                  [e for r in rounds for e in r.eval_after], list(dict.fromkeys(n for r in rounds for n in r.notes)))


def parse_args(argv=None) -> tuple[argparse.Namespace, Setup]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["quickstart", "counting"], default="quickstart",
                        help="quickstart: the tiny model on addition (answers of 1-2 tokens); counting: a 25 M-parameter "
                        "model counting out ranges (answers of 1 to 250 tokens, long-tailed; benchmarks/counting_task.py)")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps on each side (default 20, counting 10; --quick: 3)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 steps of 8 prompts (counting: 2) after a "
                        "60-step warm-up (counting: its full warm-up, reused from the workdir)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of both sides: prompt order and sampling")
    parser.add_argument("--init", type=Path, default=None, help="start from this HF directory (skips the warm-up)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the data, the warm-up, both sides' runs and results.txt go "
                        "(default runs/bench-trl-vs-slime, counting: runs/bench-trl-vs-slime-counting)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat both sides, alternating which goes first "
                        "(slime-TRL, TRL-slime, ...), to even out a machine whose load changes")
    parser.add_argument("--slime-train-mode", choices=["sync", "async"], default="sync",
                        help="slime's --train-mode; async generates the next rollout while it trains (one step off-policy)")
    args = parser.parse_args(argv)
    args.workdir = args.workdir or ROOT / "runs" / ("bench-trl-vs-slime" + ("-counting" if args.task == "counting" else ""))
    if args.task == "counting":
        setup = counting_setup(args.workdir, args.quick)
    else:
        setup = Setup(steps=3, prompts_per_step=8, sft_rollouts=60) if args.quick else Setup()
    setup.steps, setup.seed, setup.slime_train_mode = args.steps or setup.steps, args.seed, args.slime_train_mode
    return args, setup


def main(argv=None) -> int:
    args, setup = parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print(f"This benchmark needs TRL, which is not installed here. Install it with:\n  {TRL_INSTALL}", file=sys.stderr)
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    init = args.init or warm_start(args.workdir, setup)
    print(f"{setup.task}: model {init} has {parameter_count(init) / 1e6:.1f} M parameters", flush=True)
    eval_before = eval_model_dir(init, setup)
    runs: dict[str, list[Result]] = {"slime": [], "TRL": []}
    for round_ in range(args.rounds):
        sides = [run_slime, run_trl] if round_ % 2 == 0 else [run_trl, run_slime]
        for side in sides:
            result = side(init, args.workdir / f"round{round_}", setup)
            result.notes.append(f"round {round_}, {result.name}: {statistics.mean(result.step_seconds):.2f} s/step "
                                f"(median {statistics.median(result.step_seconds):.2f}), load average "
                                f"{os.getloadavg()[0]:.1f} at its end")
            runs[result.name].append(result)
    results = [merge(rounds) for rounds in runs.values()]
    report = table(results, setup, eval_before) + f"\nload average after: {os.getloadavg()}"
    print("\n" + report)
    (args.workdir / "results.txt").write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
