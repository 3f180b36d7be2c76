"""Run THUDM/slime's example functions unmodified through `slime run` on CPU, and print which train.

    python scripts/run_slime_examples.py PATH_TO_SLIME_CHECKOUT [NAME ...]

Each example is laid out as slime's launch scripts lay it out: the checkout's ``examples/``
folder copied into a scratch directory that goes on ``PYTHONPATH`` (``examples.multi_agent...``
resolves), and the example's own folder too where its launch script names its modules bare
(``generate_with_search.generate``); slime's own ``slime/`` package is not copied, so
``from slime... import`` resolves to slime-compat's namespace. A file slime users copy out of
slime's library (its dynamic-sampling filters) is copied the same way. Each example then runs
``slime run`` on CPU (CPU engine, FSDP, a tiny random Qwen3 with a character tokenizer, two
rollouts) with the flags its launch script gives it, shrunk to the tiny model; geo3k's multi-turn
example gets a tiny random Qwen2.5-VL and two geo3k-style records with a figure each; search-r1 gets a
fake retrieval server on the address its code names (127.0.0.1:8000), retool runs its own local
Python tool, on-policy distillation a teacher CPU engine on the tiny model at ``--rm-url`` (as
slime's launch starts a teacher SGLang server). An example trains when its run exits 0 and logged
train metrics for every rollout.

Examples that need a third-party service or package slime does not install itself are listed
with what they need, not run. NAME picks examples.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROLLOUTS = 2
TIMEOUT_S = 900
#: the flags of every run: CPU engine and FSDP, a tiny batch, short responses
COMMON = (
    "--rollout-engine", "cpu", "--train-backend", "fsdp", "--num-rollout", str(ROLLOUTS),
    "--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--global-batch-size", "4",
    "--rollout-max-response-len", "24", "--lr", "1e-4", "--rollout-temperature", "1.0",
)  # fmt: skip
MATH = [
    {"prompt": f"What is {a} + {b}? Put the answer in \\boxed{{}}.", "label": str(a + b)} for a, b in [(1, 2), (3, 4)]
]


@dataclass
class Example:
    """One example function (or set of them) and how its launch script runs it."""

    name: str
    runs: str  # what of slime's runs, as the table shows it
    flags: tuple[str, ...] = ()
    data: list[dict] = field(default_factory=lambda: list(MATH))
    bare_modules_from: str | None = None  # an examples/ folder whose modules the launch names bare
    copied_library_file: str | None = None  # a file of slime's library a user copies next to their code
    needs: str | None = None  # why it is not run here
    family: str = "qwen3"  # the tiny model's (`slime tiny-model --family`)


def opd_launch(module: str, *teacher: str) -> tuple[str, ...]:
    """slime's OPD launch (examples/on_policy_distillation/run-qwen3-8B-opd.sh), its functions from
    ``module``, with the ``teacher`` flags."""
    return (
        "--custom-rm-path", f"{module}.reward_func",
        "--custom-reward-post-process-path", f"{module}.post_process_rewards",
        "--use-opd", "--opd-type", "sglang", "--opd-kl-coef", "1.0", *teacher,
    )  # fmt: skip


EXAMPLES = [
    Example(
        "search-r1",
        "`examples/search-r1`: `generate_with_search.generate`, `reward_func` (fake retrieval server)",
        (
            "--custom-generate-function-path",
            "generate_with_search.generate",
            "--custom-rm-path",
            "generate_with_search.reward_func",
            "--label-key",
            "reward_model",
        ),  # fmt: skip
        data=[
            {"prompt": "Question: who wrote Hamlet?", "reward_model": {"ground_truth": {"target": ["Shakespeare"]}}},
            {
                "prompt": "Question: what is the capital of France?",
                "reward_model": {"ground_truth": {"target": ["Paris"]}},
            },
        ],
        bare_modules_from="search-r1",
    ),
    Example(
        "retool",
        "`examples/retool`: `generate_with_retool.generate`, `reward_func` (its local Python tool)",
        (
            "--custom-generate-function-path",
            "generate_with_retool.generate",
            "--custom-rm-path",
            "generate_with_retool.reward_func",
            "--reward-key",
            "score",
            "--max-tokens-per-gpu",
            "4096",
        ),  # fmt: skip
        bare_modules_from="retool",
    ),
    Example(
        "multi_agent",
        "`examples/multi_agent`: `rollout_with_multi_agents.generate_with_multi_agents` (list-returning)",
        (
            "--custom-generate-function-path",
            "examples.multi_agent.rollout_with_multi_agents.generate_with_multi_agents",
            "--rm-type",
            "deepscaler",
            "--rollout-max-context-len",
            "2048",
        ),  # fmt: skip
    ),
    Example(
        "dynamic-sampling filters",
        "`slime/rollout/filter_hub/dynamic_sampling_filters.py` (copied): `check_reward_nonzero_std_with_fallback` "
        "(through it, `check_reward_nonzero_std`: the tiny model's math rewards are all equal, so only the fallback "
        "lets a rollout fill)",
        (
            "--dynamic-sampling-filter-path",
            "dynamic_sampling_filters.check_reward_nonzero_std_with_fallback",
            "--rm-type",
            "math",
            "--dynamic-sampling-max-groups",
            "50",
        ),  # fmt: skip
        copied_library_file="slime/rollout/filter_hub/dynamic_sampling_filters.py",
    ),
    Example(
        "train_infer_mismatch_helper",
        "`examples/train_infer_mismatch_helper`: `mis.compute_mis_weights_with_cp` with its `mis.yaml`",
        (
            "--custom-tis-function-path",
            "examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp",
            "--custom-config-path",
            "examples/train_infer_mismatch_helper/mis.yaml",
            "--use-tis",
            "--rm-type",
            "math",
        ),  # fmt: skip
    ),
    Example(
        "on_policy_distillation",
        "`examples/on_policy_distillation`: slime's OPD `reward_func` / `post_process_rewards`, as its launch runs "
        "them (a teacher engine on the same tiny model at `--rm-url`)",
        opd_launch("slime.rollout.on_policy_distillation", "--rm-url", "{teacher}/generate"),
    ),
    Example(
        "on_policy_distillation copied",
        "`slime/rollout/on_policy_distillation.py` (copied): its `reward_func` / `post_process_rewards` "
        "(the teacher engine at `--rm-url`)",
        opd_launch("on_policy_distillation", "--rm-url", "{teacher}/generate"),
        copied_library_file="slime/rollout/on_policy_distillation.py",
    ),
    Example(
        "on_policy_distillation native",
        "`examples/on_policy_distillation` with `--opd-teacher-load` (the native teacher, no server)",
        opd_launch("slime.rollout.on_policy_distillation", "--opd-teacher-load", "{model}"),
    ),
    Example(
        "sft_rollout",
        "`slime.rollout.sft_rollout.generate_rollout` (retool's SFT launch)",
        (
            "--rollout-function-path",
            "slime.rollout.sft_rollout.generate_rollout",
            "--input-key",
            "messages",
            "--loss-type",
            "sft_loss",
            "--calculate-per-token-loss",
            "--disable-compute-advantages-and-returns",
            "--debug-train-only",
            "--n-samples-per-prompt",
            "1",
            "--global-batch-size",
            "2",
        ),  # fmt: skip
        data=[
            {"messages": [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)}]}
            for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
        ],
    ),
    Example(
        "fully_async",
        "`examples/fully_async`: `slime.rollout.fully_async_rollout.generate_rollout_fully_async` (our async mode)",
        (
            "--rollout-function-path",
            "slime.rollout.fully_async_rollout.generate_rollout_fully_async",
            "--rm-type",
            "deepscaler",
        ),
    ),
    Example(
        "tau-bench",
        "`examples/tau-bench`",
        needs="the `tau_bench` package (JD-ETH/tau-bench, branch feature/litellm-retry, with litellm), `sglang` "
        "(its tool parser imports `sglang.srt.function_call`) and an API key for tau-bench's LLM user simulator "
        "(GEMINI_API_KEY, gemini-2.5-flash-lite as configured)",
    ),
    Example(
        "strands_sglang",
        "`examples/strands_sglang`",
        needs="the `strands-agents` and `strands-sglang` (0.4.2) packages",
    ),
    Example(
        "coding_agent_rl",
        "`examples/coding_agent_rl`",
        needs="an E2B-compatible sandbox cluster (the `e2b` SDK, E2B_API_KEY, "
        "SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY) reachable both ways, and the Node 22 and Claude Code CLI tarballs "
        "it uploads into each sandbox (SLIME_AGENT_NODE_TARBALL, SLIME_AGENT_CC_TARBALL)",
    ),
    Example(
        "geo3k_vlm_multi_turn",
        "`examples/geo3k_vlm_multi_turn`: `rollout.generate` with its `geo3k_vlm_multi_turn_config.yaml` (`env_geo3k`; "
        "the tiny model calls no tool, so each episode ends after one turn: packages/slime-compat's "
        "test_geo3k_example.py runs these files with an environment that shows a picture in a second turn)",
        (
            "--input-key",
            "problem",
            "--label-key",
            "answer",
            "--multimodal-keys",
            '{"image": "images"}',
            "--rm-type",
            "math",
            "--apply-chat-template",
            "--custom-generate-function-path",
            "examples.geo3k_vlm_multi_turn.rollout.generate",
            "--custom-config-path",
            "examples/geo3k_vlm_multi_turn/geo3k_vlm_multi_turn_config.yaml",
            # its turns' token budget counts the prompt against --rollout-max-response-len unless this is set
            "--rollout-max-context-len",
            "200",
        ),  # fmt: skip
        data=[],  # geo3k_records()
        family="qwen2_5_vl",
    ),
]


def geo3k_records() -> list[dict]:
    """Two records as slime's geo3k data has them (a problem with an ``<image>``, the answer, the
    figure under ``images``), the figures inline as PNG data URLs."""
    import base64
    import io

    from PIL import Image, ImageDraw

    records = []
    for side in (3, 5):
        figure = Image.new("RGB", (32, 32), "white")
        ImageDraw.Draw(figure).rectangle([4, 4, 4 + 4 * side, 24], outline="red")
        png = io.BytesIO()
        figure.save(png, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
        records.append({"problem": "<image>Find x. Put the answer in \\boxed{}.", "answer": str(side), "images": [url]})
    return records


class FakeRetrieval(BaseHTTPRequestHandler):
    """search-r1's retrieval server, answering every query with one made-up passage."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        passage = {"document": {"id": "0", "contents": f'"{body["queries"][0][:40]}"\nA passage about it.'}}
        answer = json.dumps({"result": [[passage] * body.get("topk", 1)]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def lay_out(checkout: Path, scratch: Path, example: Example) -> list[str]:
    """Copy what the example's launch script puts on PYTHONPATH into ``scratch``; the PYTHONPATH."""
    if not (scratch / "examples").exists():
        shutil.copytree(checkout / "examples", scratch / "examples")
    path = [str(scratch)]
    if example.bare_modules_from:
        path.append(str(scratch / "examples" / example.bare_modules_from))
    if example.copied_library_file:
        user = scratch / "user_code"
        user.mkdir(exist_ok=True)
        shutil.copy(checkout / example.copied_library_file, user)
        path.append(str(user))
    return path


def run_example(example: Example, checkout: Path, scratch: Path, model: Path, teacher: str) -> str:
    """``trains``, or why not (the run's last error line); ``teacher``: the teacher engine's URL."""
    pythonpath = lay_out(checkout, scratch, example)
    work = scratch / example.name.replace(" ", "_")
    work.mkdir()
    data = work / "prompts.jsonl"
    records = example.data or geo3k_records()
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    flags = [flag.replace("{model}", str(model)).replace("{teacher}", teacher) for flag in example.flags]
    argv = [
        str(Path(sys.executable).parent / "slime"),
        "run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(model),
    ]
    argv += [*COMMON, *flags, "--output-dir", str(work / "run")]
    env = {**_environ(), "PYTHONPATH": ":".join(pythonpath)}
    try:
        done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no: did not finish in {TIMEOUT_S} s"
    (work / "stderr.txt").write_text(done.stderr)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return "no: " + (lines[-1][:300] if lines else f"exit {done.returncode}")
    return "trains" if _trained_rollouts(work / "run" / "metrics.jsonl") == ROLLOUTS else "no: no train metrics"


@contextlib.contextmanager
def teacher_engine(model: Path, chosen: list[Example]) -> Iterator[str]:
    """The on-policy distillation teacher, as slime's OPD launch starts one: a CPU engine
    serving ``model`` (its URL), when a chosen example asks for it."""
    if not any("{teacher}" in flag for example in chosen for flag in example.flags):
        yield ""
        return
    from slime_sglang.cpu_engine.launch import cpu_engine

    with cpu_engine(model) as url:
        yield url


def _trained_rollouts(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return sum(1 for r in records if r.get("rollout_id", -1) >= 0 and any(key.startswith("train/") for key in r))


def _environ() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def tiny_model(scratch: Path, family: str, *flags: str) -> Path:
    """``slime tiny-model`` of ``family`` in ``scratch`` (written once)."""
    model = scratch / f"tiny-{family}"
    if not model.exists():
        slime = str(Path(sys.executable).parent / "slime")
        subprocess.run([slime, "tiny-model", str(model), "--family", family, *flags], check=True)
    return model


def main(checkout: Path, names: list[str]) -> None:
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    chosen = [example for example in EXAMPLES if not names or example.name in names]
    server = ThreadingHTTPServer(("127.0.0.1", 8000), FakeRetrieval)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rows = []
    with tempfile.TemporaryDirectory(prefix="slime-examples-") as scratch:
        model = tiny_model(Path(scratch), "qwen3", "--max-positions", "4096")
        with teacher_engine(model, chosen) as teacher:
            for example in chosen:
                result = f"not run: needs {example.needs}" if example.needs else None
                family_model = model if example.family == "qwen3" else tiny_model(Path(scratch), example.family)
                result = result or run_example(example, checkout, Path(scratch), family_model, teacher)
                print(f"{example.name}: {result}", flush=True)
                rows.append(f"| {example.runs} | {result} |")
    server.shutdown()
    print(f"\nslime commit {commit.strip() or '(not a git checkout)'}\n\n| example | on CPU here |\n|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    if len(sys.argv) < 2 or not (Path(sys.argv[1]) / "examples").is_dir():
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2:])
