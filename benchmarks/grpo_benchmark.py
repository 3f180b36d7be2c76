"""What both sides of ``benchmarks/trl_vs_slime.py`` share: the training setup, one side's
measurements, the greedy eval on held-out prompts (transformers ``generate``, the same for
both sides) and running slime's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart"
SLIME = os.environ.get("SLIME", str(Path(sys.executable).with_name("slime")))  # as examples/quickstart/run.sh
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


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_rows(setup: Setup) -> list[dict]:
    return read_jsonl(setup.eval_data)[: setup.eval_prompts]


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
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    answers = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(exact_match(a, r["label"]) for a, r in zip(answers, rows)) / len(rows)


def load_model(path: Path):
    """The Hugging Face model in ``path``, decoding with its KV cache: slime's FSDP exports
    (``--save-hf``) made before 2026-11-25 wrote ``use_cache: false`` (its training setting)
    into their configs, and ``generate`` then recomputes the whole sequence for every new
    token (quadratic in the answer's length)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    model.config.use_cache = model.generation_config.use_cache = True
    return model


def eval_model_dir(path: Path, setup: Setup) -> float:
    from transformers import AutoTokenizer

    return greedy_accuracy(
        load_model(path), AutoTokenizer.from_pretrained(path), eval_rows(setup), setup.max_response_len
    )


def parameter_count(path: Path) -> int:
    """Parameters of the Hugging Face model in ``path`` (tied embeddings counted once)."""
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env={**os.environ, **SAME_PRIORITY})
