"""``slime reward score``: grade saved generations offline with any registered reward.

Reads JSONL lines with ``response`` and ``label`` (optional ``metadata`` and ``prompt``),
writes the same lines with ``reward`` added (and ``reward_error`` where grading failed),
and prints a summary. Malformed lines are reported with their line number and skipped;
the exit code is 1 if there were any.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from slime_core.config import ConfigError, OptionSet, load_overrides
from slime_core.rollout.reward_hub import RewardHub, scalar_reward
from slime_core.sample import Sample, SampleStatus


def add_score_command(subparsers) -> None:
    reward = subparsers.add_parser("reward", help="reward tools (slime reward score ...)")
    commands = reward.add_subparsers(title="reward commands", metavar="COMMAND")
    score = commands.add_parser(
        "score",
        help="add rewards to a JSONL file of responses",
        description="Grade JSONL lines with `response` and `label`. Any declared option (--rm-url, --rm-timeout, "
        "--reward-key, options of reward plugins) may follow.",
    )
    score.add_argument("input", help="JSONL file with response, label and optional metadata/prompt")
    score.add_argument("-o", "--output", help="where to write the scored lines (default: standard output)")
    score.add_argument("--rm-type", required=True, help="registered reward function")
    score.set_defaults(func=run_score, allow_extra=True)


def run_score(args) -> int:
    from slime_core.plugins import Plugins

    plugins = Plugins(args.plugin_modules or [])
    options = OptionSet()
    plugins.add_options(options)
    try:
        config = load_overrides(["--rm-type", args.rm_type, *args.extra], options)
    except ConfigError as exc:
        print(f"slime reward score: {exc}", file=sys.stderr)
        return 2
    records, malformed = read_lines(Path(args.input))
    samples = [to_sample(i, record) for i, (_, record) in enumerate(records)]
    hub = RewardHub(config, plugins)
    try:
        asyncio.run(_score_all(hub, samples))
    finally:
        hub.close()
    write_lines(records, samples, args.output)
    print(summary(samples, config.reward_key, malformed), file=sys.stderr)
    return 1 if malformed else 0


async def _score_all(hub: RewardHub, samples: list[Sample]) -> None:
    await asyncio.gather(*(hub.score_sample(sample) for sample in samples))


def read_lines(path: Path) -> tuple[list[tuple[int, dict]], int]:
    """Valid ``(line number, record)`` pairs, reporting malformed lines to stderr."""
    records, malformed = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        problem = None
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "response" not in record:
                problem = "expected a JSON object with a 'response' key"
        except json.JSONDecodeError as exc:
            problem = f"invalid JSON ({exc.msg} at column {exc.colno})"
        if problem:
            malformed += 1
            print(f"{path}:{number}: {problem}; line skipped", file=sys.stderr)
        else:
            records.append((number, record))
    return records, malformed


def to_sample(position: int, record: dict) -> Sample:
    return Sample(
        group_index=position,
        index=0,
        prompt=record.get("prompt", ""),
        response=str(record["response"]),
        label=record.get("label"),
        metadata=dict(record.get("metadata") or {}),
        status=SampleStatus.COMPLETED,
    )


def write_lines(records: list[tuple[int, dict]], samples: list[Sample], output: str | None) -> None:
    lines = []
    for (_, record), sample in zip(records, samples):
        scored = {**record, "reward": sample.reward}
        if sample.error:
            scored["reward_error"] = sample.error
        lines.append(json.dumps(scored) + "\n")
    if output:
        Path(output).write_text("".join(lines), encoding="utf-8")
    else:
        sys.stdout.writelines(lines)


def summary(samples: list[Sample], reward_key: str | None, malformed: int) -> str:
    scored = [s for s in samples if s.reward is not None]
    try:
        values = [scalar_reward(s, reward_key) for s in scored]
        mean = f"{sum(values) / len(values):.4f}" if values else "n/a"
    except ValueError as exc:
        mean = f"n/a ({exc})"
    failures = sum(1 for s in samples if s.error)
    return f"scored {len(samples)} lines: mean reward {mean}, {failures} failed, {malformed} malformed"
