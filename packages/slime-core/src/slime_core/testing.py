"""Checks for plugin authors' test suites (slime's own packages use them too)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

HEAVY_MODULES = ("torch", "ray", "transformers", "megatron", "sglang")


def check_plugin_installed(name: str, distribution: str) -> dict:
    """Assert that plugin ``name`` is found through the ``slime`` entry-point group, comes
    from ``distribution``, and that importing it (as ``slime --help`` does) stays light.

    Returns the plugin's entry in ``slime plugins``' description.
    """
    from slime_core.plugins import Plugins

    described = {plugin["name"]: plugin for plugin in Plugins().describe()}
    assert name in described, f"plugin '{name}' not found through the slime entry points; installed: {sorted(described)}"
    assert described[name]["distribution"] == distribution, described[name]
    module = Plugins().info[name].module.__name__
    code = f"import sys, {module}; print([m for m in {HEAVY_MODULES!r} if m in sys.modules])"
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == "[]", f"importing {module} imports heavy modules: {heavy}"
    return described[name]


def make_config(data_path: str, hf_checkpoint: str, **overrides):
    """A resolved `Config` from every installed plugin's options, as ``slime run`` builds it,
    with ``overrides`` given by key (``lr=1e-3``). Validation applies (the batch constraint
    fills in derived sizes)."""
    from slime_core.config import OptionSet, load_config
    from slime_core.plugins import Plugins

    plugins = Plugins()
    options = OptionSet()
    plugins.add_options(options)
    argv = ["--prompt-data", str(data_path), "--hf-checkpoint", str(hf_checkpoint)]
    for key, value in overrides.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif value is not None:
            argv += [flag, *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    return load_config(argv, options, plugins)


@contextlib.contextmanager
def ray_session(num_cpus: int = 4):
    """A local Ray instance whose auth token and session files live in a fresh temporary
    folder (not ``$HOME/.ray`` or the system temp folder), removed after shutdown. The
    folder is short on purpose: Ray's Unix socket paths must stay under 108 bytes."""
    import shutil
    import tempfile

    import ray

    work_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    saved = {key: os.environ.get(key) for key in ("HOME", "RAY_TMPDIR")}
    os.environ.update(HOME=str(work_dir), RAY_TMPDIR=str(work_dir))
    try:
        ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=str(work_dir), log_to_driver=False,
                 _system_config={"worker_niceness": 0})
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(work_dir, ignore_errors=True)


def synthetic_rollout_batch(num_groups: int = 4, group_size: int = 4, seed: int = 0, max_response: int = 8) -> RolloutBatch:
    """Addition prompts (character tokenizer) with random responses of 1..``max_response``
    tokens and random 0/1 rewards: train data for backend tests without an engine."""
    import random

    from slime_core.rollout_batch import RolloutBatch
    from slime_core.tiny_models import build_char_tokenizer

    rng = random.Random(seed)
    tokenizer = build_char_tokenizer()
    batch = RolloutBatch()
    for group in range(num_groups):
        prompt = tokenizer.encode(f"{rng.randint(0, 49)}+{rng.randint(0, 49)}=")
        for _ in range(group_size):
            response = [rng.randrange(4, 100) for _ in range(rng.randint(1, max_response))]
            batch.tokens.append(prompt + response)
            batch.response_lengths.append(len(response))
            batch.loss_masks.append([1] * len(response))
            batch.rewards.append(float(rng.random() < 0.5))
            batch.group_ids.append(group)
            batch.rollout_log_probs.append([-1.0] * len(response))
    return batch


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links): what a run started."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait() has stopped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def command_line(pid: int) -> str:
    """The command line of process ``pid`` ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ").strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def processes_running(*words: str) -> list[int]:
    """Pids of the live processes whose command line contains every one of ``words``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if all(any(word in arg for arg in argv) for word in words) and alive(int(cmdline.parent.name)):
            found.append(int(cmdline.parent.name))
    return found
