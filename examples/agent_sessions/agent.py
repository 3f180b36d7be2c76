"""A small tool-using agent, written against the official ``openai`` client, whose episodes
become training samples through slime-router's ``sessions`` middleware.

    .venv/bin/python examples/agent_sessions/agent.py                    # tiny model, CPU engine, ~1 min
    .venv/bin/python examples/agent_sessions/agent.py --router-url URL   # a router already running

The agent answers addition questions. It offers the model a ``calculator`` tool and runs the
calls the model makes; when the model answers without the right number, the agent says so
and lets it try again, for at most ``max_turns`` model turns. Each episode is one session
(``X-Session-Id``): afterwards ``session_sample`` returns its exact tokens as a `Sample`, with
loss mask 1 on what the model generated and 0 on the tool results and the agent's messages,
and the agent sets the reward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import tempfile
import uuid
from pathlib import Path

import openai

from slime_core.sample import Sample
from slime_router.sessions.client import session_sample

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
SYSTEM = "Answer with the number only. Call the calculator tool when you need to add."


def calculator(arguments: str) -> str:
    """The tool: the sum of ``a`` and ``b``, or what is wrong with the call."""
    try:
        values = json.loads(arguments)
        return str(int(values["a"]) + int(values["b"]))
    except (ValueError, KeyError, TypeError) as exc:
        return f'error: {type(exc).__name__}: {exc}; call calculator with {{"a": int, "b": int}}'


def run_episode(
    client: openai.OpenAI, question: str, answer: int, session_id: str, max_turns: int = 3, **sampling
) -> bool:
    """Let the model answer ``question`` (tool calls, then retries), all in session ``session_id``;
    True if it gave ``answer``."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model="policy",
            messages=messages,
            tools=[CALCULATOR],
            extra_headers={"X-Session-Id": session_id},
            **sampling,
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            messages += [
                {"role": "tool", "tool_call_id": call.id, "content": calculator(call.function.arguments)}
                for call in message.tool_calls
            ]
        elif _number(message.content) == answer:
            return True
        else:
            messages.append({"role": "user", "content": "That is not the sum. Use the calculator, then answer."})
    return False


def collect(router_url: str, question: str, answer: int, **sampling) -> Sample:
    """One episode as a training sample: the session's tokens, rewarded 1 if the agent solved it."""
    client = openai.OpenAI(base_url=f"{router_url}/v1", api_key="unused")
    session_id = f"episode-{uuid.uuid4().hex}"
    solved = run_episode(client, question, answer, session_id, **sampling)
    sample = session_sample(router_url, session_id)
    sample.label, sample.reward = str(answer), float(solved)
    return sample


def _number(text: str | None) -> int | None:
    found = re.findall(r"-?\d+", text or "")
    return int(found[-1]) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--router-url", help="a router front with --router-middleware sessions (default: start one)")
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(0)
    questions = [(a, b) for a, b in ((rng.randint(1, 50), rng.randint(1, 50)) for _ in range(args.episodes))]
    if args.router_url:
        report([collect(args.router_url, f"What is {a} + {b}?", a + b) for a, b in questions])
        return
    with tempfile.TemporaryDirectory() as folder, local_router(Path(folder)) as router_url:
        report(
            [
                collect(router_url, f"What is {a} + {b}?", a + b, max_tokens=16, seed=i)
                for i, (a, b) in enumerate(questions)
            ]
        )


@contextlib.contextmanager
def local_router(folder: Path):
    """A tiny random model behind a CPU engine and the router with ``sessions``; yields the router's URL."""
    from slime_core.testing import make_config
    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_router.launch import start_router
    from slime_sglang.cpu_engine.launch import cpu_engine

    model = build_tiny_qwen3(folder / "model", max_positions=1024)
    prompts = folder / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1="}\n')
    config = make_config(prompts, model, rollout_batch_size=1, router_middleware=["sessions"], output_dir=str(folder))
    with cpu_engine(model) as engine_url, start_router(config, [engine_url]) as router:
        yield router.url


def report(samples: list[Sample]) -> None:
    for sample in samples:
        model_tokens = sum(sample.loss_mask)
        print(
            f"{sample.metadata['session_id']}: reward {sample.reward}, {len(sample.tokens)} tokens "
            f"(prompt {sample.prompt_length}, model {model_tokens}, tool/agent "
            f"{sample.response_length - model_tokens}), "
            f"{len(sample.metadata['messages'])} messages, status {sample.status.value}"
        )


if __name__ == "__main__":
    main()
