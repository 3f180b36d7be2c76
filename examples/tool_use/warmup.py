"""Warm a tiny model up on tool-use transcripts (supervised), so that RL starts from a model
that calls the calculator.

A transcript is the prompt, the call, the tool's answer, the final answer and end-of-text:
``23*7=<calc>23*7</calc><result>161</result>161<|endoftext|>``. The loss covers the whole
response (the model learns the result format too; RL later masks it out).

    python examples/tool_use/warmup.py [OUT_DIR] [STEPS]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from examples.tool_use.calculator import CALL_END, CALL_START, tool_result

HERE = Path(__file__).parent


def transcript(record: dict) -> tuple[str, str]:
    """The prompt and the ideal response (without end-of-text) of one data record."""
    prompt = record["prompt"]
    expression = prompt.rstrip("=")
    return prompt, f"{CALL_START}{expression}{CALL_END}{tool_result(expression)}{record['label']}"


def warm_up(
    model_dir: str | Path, records: list[dict], steps: int = 300, batch_size: int = 16, lr: float = 2e-3, seed: int = 0
) -> float:
    """Train the Hugging Face model in ``model_dir`` on ``records``' transcripts for ``steps``
    AdamW steps at a constant ``lr``, save it back in place; returns the last step's loss.

    The defaults take the tiny model (``build_tiny_qwen3``'s defaults) from random to calling
    the tool on every held-out prompt and copying its result right on nearly all of them (on
    2 CPU cores with one torch thread: about 7 s).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    examples = [_encode(tokenizer, *transcript(record)) for record in records]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(seed)
    for _ in range(steps):
        input_ids, labels = _batch(rng.choices(examples, k=batch_size), tokenizer.pad_token_id)
        loss = model(
            input_ids=input_ids, attention_mask=(labels != -100) | (input_ids != tokenizer.pad_token_id), labels=labels
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(model_dir)
    return loss.item()


def _encode(tokenizer, prompt: str, response: str) -> tuple[list[int], int]:
    """Token ids of prompt + response + end-of-text, and where the response starts."""
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    response_ids = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt_ids + response_ids, len(prompt_ids)


def _batch(examples: list[tuple[list[int], int]], pad_id: int):
    """(B, T) right-padded input ids and labels (-100 on the prompt and the padding)."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), -100)
    for row, (ids, start) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, start : len(ids)] = torch.tensor(ids[start:])
    return input_ids, labels


def main(out_dir: str = "runs/tool_use/tiny-qwen3", steps: str = "300") -> None:
    from slime_core.tools.tiny_models import build_tiny_qwen3

    records = [json.loads(line) for line in (HERE / "data" / "multiply_train.jsonl").read_text().splitlines()]
    build_tiny_qwen3(out_dir)
    loss = warm_up(out_dir, records, steps=int(steps))
    print(f"warmed up {out_dir} for {steps} steps; last loss {loss:.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
