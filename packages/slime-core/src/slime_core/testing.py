"""Checks for plugin authors' test suites (slime's own packages use them too)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from slime_core.cluster.local_ray import start_local_ray

if TYPE_CHECKING:
    from slime_core.rollout_batch import RolloutBatch

HEAVY_MODULES = ("torch", "ray", "transformers", "megatron", "sglang")


class PicklePayload:
    """What a hostile checkpoint carries: unpickling it runs ``touch marker``, so a test can
    put it into a checkpoint file and check that loading the file ran nothing."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def check_plugin_installed(name: str, distribution: str) -> dict:
    """Assert that plugin ``name`` is found through the ``slime`` entry-point group, comes
    from ``distribution``, and that importing it (as ``slime --help`` does) stays light.

    Returns the plugin's entry in ``slime plugins``' description.
    """
    from slime_core.plugins import Plugins

    described = {plugin["name"]: plugin for plugin in Plugins().describe()}
    assert name in described, (
        f"plugin '{name}' not found through the slime entry points; installed: {sorted(described)}"
    )
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
        start_local_ray(
            num_cpus=num_cpus, _temp_dir=str(work_dir), log_to_driver=False, _system_config={"worker_niceness": 0}
        )
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(work_dir, ignore_errors=True)


def synthetic_rollout_batch(
    num_groups: int = 4, group_size: int = 4, seed: int = 0, max_response: int = 8
) -> RolloutBatch:
    """Addition prompts (character tokenizer) with random responses of 1..``max_response``
    tokens and random 0/1 rewards: train data for backend tests without an engine."""
    import random

    from slime_core.rollout_batch import RolloutBatch
    from slime_core.tools.tiny_models import build_char_tokenizer

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


def log_probs_alone(model, tokens: list[int], response_length: int):
    """log p of the last ``response_length`` of ``tokens`` (a (response_length,) float32 tensor)
    from one forward of the Hugging Face ``model`` over that sample alone, on its device: no
    padding, packing or cache, the reference a backend's or engine's log-probs are held to."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens], device=device)).logits[0].float()
    targets = torch.tensor(tokens[len(tokens) - response_length :], device=device)
    log_probs = logits[len(tokens) - response_length - 1 : -1].log_softmax(-1)
    return log_probs.gather(-1, targets[:, None])[:, 0]


def train_one_rollout(group, batch) -> tuple[list[list[float]], dict, list[str]]:
    """A train group's log-probs of ``batch`` before training, the metrics of one rollout
    trained on it, and the (Hugging Face) names of the weights that changed."""
    import torch

    def weights() -> dict:
        return {name: tensor.clone() for bucket in group.export_weights(1 << 24) for name, tensor in bucket}

    log_probs, before = group.compute_log_probs(batch), weights()
    metrics = group.train(0, batch)
    after = weights()
    return log_probs, metrics, [name for name in before if not torch.equal(before[name], after[name])]


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


def files_holding(folder: Path, text: str) -> list[Path]:
    """The files under ``folder`` whose bytes contain ``text`` (a secret that must not be there)."""
    needle = text.encode()
    return [path for path in Path(folder).rglob("*") if path.is_file() and needle in path.read_bytes()]


#: What a resumed rank must reproduce bit for bit (`check_rank_resume`).
RESUME_METRICS = ("loss", "pg_loss", "entropy", "grad_norm", "lr")


def check_rank_resume(rank_class, teardown, prompts: Path, tmp_path: Path, family: str, **options) -> None:
    """Assert that a ``rank_class`` rank resumed from its checkpoint trains a ``family`` model on
    bit for bit: one rank in this process trains rollout 0, saves, and trains rollout 1; a fresh
    rank resumes and trains rollout 1 again (same metrics, same weights). The fresh rank starts
    from another random model of the family (its routers' correction biases too), so any state
    the checkpoint misses comes from that model and differs. ``teardown()`` destroys the
    backend's process groups after each rank, so the next one can build its own."""
    import torch

    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    @contextlib.contextmanager
    def rank(model_dir, **more):
        try:
            group = TrainGroup(rank_class, make_config(prompts, model_dir, **options, **more), 1, in_process=True)
            yield group, group.init()
        finally:
            teardown()

    def trained(group, rollout_id: int):
        metrics = group.train(rollout_id, synthetic_rollout_batch(seed=rollout_id))
        weights = {name: tensor for bucket in group.export_weights(1 << 20) for name, tensor in bucket}
        return {key: metrics[key] for key in RESUME_METRICS}, weights

    start = build_tiny_model(tmp_path / "start", family, hidden_size=32, router_bias=0.3)
    other = build_tiny_model(tmp_path / "other", family, hidden_size=32, seed=1, router_bias=0.3)
    with rank(start, save=str(tmp_path / "ckpt")) as (group, _):
        group.train(0, synthetic_rollout_batch(seed=0))
        group.save(0)
        want_metrics, want_weights = trained(group, 1)
    with rank(other, load=str(tmp_path / "ckpt")) as (group, state):
        assert state == {"rollout_id": 1, "weight_version": 1}
        metrics, weights = trained(group, 1)
    assert metrics == want_metrics
    assert weights.keys() == want_weights.keys()
    different = [name for name in weights if not torch.equal(weights[name], want_weights[name])]
    assert not different, f"not bit-exact after the resume: {different}"


def check_gpu_train_step(rank_class, teardown, prompts: Path, tmp_path: Path, family: str, **options) -> None:
    """Assert one bf16 train step of a tiny ``family`` model (hidden size 128: head dims the
    flash kernels take) on one CUDA GPU through a ``rank_class`` rank in this process: its
    log-probs before the step are transformers' own in float32 to bf16 precision, the loss is
    finite, the gradient is not zero and the weights move. ``teardown()`` destroys the
    backend's process groups after."""
    import torch
    from transformers import AutoModelForCausalLM

    from slime_core.tools.tiny_models import build_tiny_model
    from slime_core.train_backend import TrainGroup

    model_dir = build_tiny_model(tmp_path / family, family, hidden_size=128, max_positions=512)
    batch = synthetic_rollout_batch(num_groups=2, max_response=24, seed=1)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    expected = [log_probs_alone(reference, t, r).cpu() for t, r in zip(batch.tokens, batch.response_lengths)]
    del reference
    try:
        group = TrainGroup(rank_class, make_config(prompts, model_dir, **options), 1, in_process=True)
        group.init()
        assert torch.cuda.memory_allocated() > 0  # the rank's weights are on the GPU
        log_probs, metrics, moved = train_one_rollout(group, batch)
    finally:
        teardown()
    for got, want in zip(log_probs, expected):
        torch.testing.assert_close(torch.tensor(got), want, rtol=0.0, atol=0.1)  # bf16 against float32
    assert max((torch.tensor(got) - want).abs().mean().item() for got, want in zip(log_probs, expected)) < 0.02
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert "model.embed_tokens.weight" in moved


def destroy_default_group() -> None:
    """Destroy torch's default process group if one is up (the FSDP backend's teardown between
    ranks built in one process)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def actor_and_reference_log_probs(rank_class, teardown, rank: int, world_size: int, port: int, configs) -> list:
    """Per config: the (actor, reference) log-probs of one synthetic rollout batch on a fresh
    ``rank_class`` rank (a `slime_core.rank.processes.spawn_ranks` target's body);
    ``teardown()`` destroys the backend's process groups after each."""
    from slime_core.cluster.network import LOOPBACK

    results = []
    for config in configs:
        train_rank = rank_class(config, rank, world_size, LOOPBACK, port)
        try:
            train_rank.init()
            batch = synthetic_rollout_batch(seed=0)
            results.append((train_rank.compute_log_probs(batch), train_rank.compute_log_probs(batch, "ref")))
        finally:
            teardown()
    return results
