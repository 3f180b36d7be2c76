"""TRL's side of ``benchmarks/trl_vs_slime.py``: ``GRPOTrainer`` in a fresh Python process, as a
user's ``python train.py`` runs it (its imports are part of its whole run, as slime's processes'
are of slime's), its phases timed by wrapping the trainer's methods and its steps by a callback.

    python benchmarks/trl_side.py SPEC_JSON     # what `run_trl` starts; writes result.json beside SPEC_JSON
"""

from __future__ import annotations

import dataclasses
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from grpo_benchmark import IDLE, ROOT, Result, Setup, eval_rows, exact_match, greedy_accuracy, load_model, read_jsonl  # noqa: E402


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
            timer.seconds["optimizer"] = (
                timer.seconds.get("optimizer", 0.0) + time.perf_counter() - self.optimizer_start
            )

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
        output_dir=str(workdir / "trl"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,  # TRL's default recomputes activations (~20% slower); slime's FSDP rank does not
        max_steps=setup.steps,
        per_device_train_batch_size=setup.samples_per_step,
        gradient_accumulation_steps=1,
        num_generations=setup.group_size,
        max_completion_length=setup.max_response_len,
        temperature=setup.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=setup.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        seed=setup.seed,
        logging_steps=1,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def run_trl(init: Path, workdir: Path, setup: Setup) -> Result:
    """TRL's run in a fresh process; its whole run is the process's wall time, launch to exit,
    less the greedy eval it ends with (slime's evals and saves are taken out of its figure too)."""
    out = workdir / "trl"
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(
        json.dumps({"init": str(init), "workdir": str(workdir), "setup": dataclasses.asdict(setup)}, default=str)
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, str(spec)], check=True, cwd=ROOT)
    wall = time.perf_counter() - start
    fields = json.loads((out / "result.json").read_text())
    eval_seconds, trainer_seconds = fields.pop("eval_seconds"), fields.pop("trainer_seconds")
    result = dataclasses.replace(Result(**fields), total_seconds=wall - eval_seconds)
    result.notes.append(
        f"TRL's whole run {result.total_seconds:.1f} s: {trainer_seconds:.1f} s loading the model, building "
        f"GRPOTrainer and training, {result.total_seconds - trainer_seconds:.1f} s of interpreter start and imports"
    )
    return result


def train_and_eval(init: Path, workdir: Path, setup: Setup) -> tuple[Result, dict[str, float]]:
    """GRPOTrainer's run in this process, then the greedy eval of its weights; the result and
    the seconds of the eval and of the trainer (built and trained)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    def reward(prompts, completions, label, **kwargs):
        return [exact_match(c, answer) for c, answer in zip(completions, label)]

    start = time.perf_counter()
    result, timer = Result("TRL"), PhaseTimer()
    tokenizer = AutoTokenizer.from_pretrained(init)
    clock = trl_step_callback(timer, result)
    trainer = GRPOTrainer(
        model=load_model(init),
        reward_funcs=reward,
        args=trl_config(workdir, setup),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(read_jsonl(setup.train_data)),
        callbacks=[clock],
    )
    timer.wrap(trainer, "_generate", "generation")
    timer.wrap(trainer, "_calculate_rewards", "reward")
    timer.wrap(trainer, "_generate_and_score_completions", "generate and score")
    timer.wrap(trainer, "training_step", "training step")
    trainer.train()
    trainer_seconds = time.perf_counter() - start
    marks = clock.cpu_marks
    result.cpu = {"TRL's process": (marks[-1] - marks[0]) / (len(marks) - 1)}
    result.phases = trl_phases(timer.seconds, sum(result.step_seconds), len(result.step_seconds))
    result.rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry][-5:]
    start = time.perf_counter()
    result.eval_after = [greedy_accuracy(trainer.model, tokenizer, eval_rows(setup), setup.max_response_len)]
    return result, {"eval_seconds": time.perf_counter() - start, "trainer_seconds": trainer_seconds}


def trl_phases(seconds: dict[str, float], wall: float, steps: int) -> dict[str, float]:
    """Mean seconds per step: generation, reward, training (scoring the completions' log-probs,
    loss, backward, optimizer), weight sync (none) and what is left (dataloader, logging)."""
    generation, reward = seconds.get("generation", 0.0), seconds.get("reward", 0.0)
    scoring = seconds.get("generate and score", 0.0) - generation - reward
    training = (
        seconds.get("training step", 0.0) - seconds.get("generate and score", 0.0) + seconds.get("optimizer", 0.0)
    )
    totals = {"generation + reward": generation + reward, "training": training + scoring, "weight sync": 0.0}
    totals[IDLE] = wall - sum(totals.values())
    return {name: value / steps for name, value in totals.items()} | {"  of which reward": reward / steps}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    setup = Setup(**spec["setup"])
    setup.train_data, setup.eval_data = Path(setup.train_data), Path(setup.eval_data)
    result, seconds = train_and_eval(Path(spec["init"]), Path(spec["workdir"]), setup)
    Path(spec_path).with_name("result.json").write_text(json.dumps({**dataclasses.asdict(result), **seconds}))


if __name__ == "__main__":
    main(sys.argv[1])
