"""The checkpoint directory every train backend writes (``--save``) and resumes from (``--load``).

    DIR/iter_0000003/                       the policy's checkpoint after rollout 3, backend's format
    DIR/critic/iter_0000003/                a PPO critic's (the same layout, its own pointer)
    DIR/rollout_state/iter_0000003.json     the driver's: the rollout id and the data source's state
    DIR/latest_checkpointed_iteration.txt   "3"

Each role has its own place (`role_dir`, `rollout_state_path`), so no role's save touches
another's; the policy keeps the top level, as Megatron-LM lays a checkpoint out (slime's
``--load`` and ``--ref-load`` read it there). A checkpoint is written into
``iter_0000003.tmp`` (`staging`), made durable and renamed once every rank has finished,
and only then does the ``latest`` file name it (`publish`), so a crash or a full disk
mid-save never leaves a checkpoint that looks complete nor one that vanishes on a power
loss: `latest_checkpoint` follows the ``latest`` file only. The driver saves the rollout
state and the critic before the policy, whose pointer makes the set the latest. A run
resumes from the latest, or from an earlier one with ``--ckpt-step`` (`resume_checkpoint`);
``--save-retain-count N`` deletes all but the newest N after each save (`prune`). The
backends add the barriers around these steps (they need torch.distributed); the one after the
writes (`confirm_written`) also deletes the partial directory of a save that failed.

Checkpoints written before the roles had their own places hold a PPO run's critic in
``iter_*`` (it overwrote the policy there): those are refused with a message
(`missing_critic`); GRPO-style ones (no critic) are the same layout as today's.

The same layout written by Megatron-LM (slime's ``--ref-load``, from its
tools/convert_hf_to_torch_dist.py, may point at ``release`` instead of an iteration) is read
by `megatron_checkpoint`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config import Config

LATEST = "latest_checkpointed_iteration.txt"
#: where each role's checkpoints live under the ``--save`` directory ("" = the top level)
ROLE_DIRS = {"policy": "", "critic": "critic"}
ROLLOUT_STATE = "rollout_state"
_ITERATION = re.compile(r"^iter_(\d{7})$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or must not be read; the message says which file,
    why, and what to do (`slime run` prints it without a traceback)."""


def role_dir(root: str | Path, role: str) -> Path:
    """Where ``role``'s checkpoints live under ``root`` (a ``--save`` / ``--load`` directory)."""
    return Path(root) / ROLE_DIRS[role]


def rollout_state_path(root: str | Path, rollout_id: int) -> Path:
    """The driver's state (rollout id, data source) saved with the checkpoint of ``rollout_id``."""
    return Path(root) / ROLLOUT_STATE / f"iter_{rollout_id:07d}.json"


def staging(root: str | Path, rollout_id: int) -> tuple[Path, Path]:
    """(final, tmp) directories of the checkpoint of ``rollout_id``."""
    final = Path(root) / f"iter_{rollout_id:07d}"
    return final, final.with_name(final.name + ".tmp")


def prepare(tmp: Path) -> None:
    """An empty ``tmp`` directory (one rank calls this, before the others write into it)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)


def confirm_written(tmp: Path, failure: Exception | None) -> None:
    """The barrier after every rank has written its part of ``tmp`` (``failure``: this rank's
    error, or None), which tells each rank whether all did. If one failed (a full disk), rank 0
    deletes the partial ``tmp``, so the disk gets its space back, and every rank raises (its own
    error, or one naming the ranks that failed) instead of waiting for a rank that will not come."""
    import torch
    import torch.distributed as dist

    failed = torch.zeros(dist.get_world_size(), dtype=torch.int32)  # CPU: gloo on either backend's group
    failed[dist.get_rank()] = int(failure is not None)
    dist.all_reduce(failed)
    ranks = failed.nonzero().flatten().tolist()
    if not ranks:
        return
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    if failure is not None:
        raise failure
    raise CheckpointError(
        f"writing {tmp} failed on rank(s) {ranks} (each rank's log says why); the partial checkpoint was deleted"
    )


def publish(tmp: Path, final: Path, rollout_id: int) -> None:
    """Make the finished ``tmp`` the checkpoint of ``rollout_id`` and the latest (one rank
    calls this, after every rank has finished writing): its files and directory reach the
    disk (fsync) before the rename, the rename before the pointer moves. A checkpoint of the
    same rollout already there (a run resumed from an earlier one) is moved aside first and
    deleted last, so the pointer never names a directory half deleted."""
    sync_tree(tmp)
    replaced = final.with_name(final.name + ".replaced")
    if final.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        os.replace(final, replaced)
    os.replace(tmp, final)
    sync_directory(final.parent)
    write_atomically(final.parent / LATEST, str(rollout_id))
    shutil.rmtree(replaced, ignore_errors=True)


def sync_tree(directory: Path) -> None:
    """fsync every file and directory under ``directory`` (and itself): written, not just cached."""
    for parent, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(parent, name), "rb") as file:
                os.fsync(file.fileno())
        sync_directory(Path(parent))


def sync_directory(directory: Path) -> None:
    """fsync a directory: its entries (a file created or renamed in it) reach the disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def durable_file(path: Path) -> Iterator[IO[bytes]]:
    """``path`` opened for writing; flushed and fsynced when the block ends (a rank's own
    files of a checkpoint, e.g. ``torch.save(extra, file)``)."""
    with open(path, "wb") as file:
        yield file
        file.flush()
        os.fsync(file.fileno())


def latest_checkpoint(root: str | Path, written_by: str = "an earlier run") -> Path | None:
    """The newest complete checkpoint under ``root``; None if it holds none yet. A ``root``
    that does not exist is an error (a typo must not silently start a fresh run)."""
    directory = Path(root)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"--load {root}: the directory does not exist; give the --save directory of "
            f"{written_by}, or drop --load to start from --hf-checkpoint"
        )
    latest = directory / LATEST
    if not latest.is_file():
        return None
    path = directory / f"iter_{int(latest.read_text().strip()):07d}"
    if not path.is_dir():
        raise FileNotFoundError(
            f"{latest} names {path.name}, which is missing; the checkpoint directory was changed by hand"
        )
    return path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s content at once and durably: a reader sees the old text or the new,
    never half, and after a power loss the new one once this returns (write, fsync, rename,
    fsync the directory)."""
    tmp = path.with_name(path.name + ".tmp")
    with durable_file(tmp) as file:
        file.write(text.encode())
    os.replace(tmp, path)
    sync_directory(path.parent)


def saved_rollouts(root: str | Path) -> list[int]:
    """The rollout ids of the complete checkpoints directly under ``root`` (not ``.tmp``), oldest first."""
    directory = Path(root)
    found = [_ITERATION.match(p.name) for p in directory.iterdir()] if directory.is_dir() else []
    return sorted(int(m.group(1)) for m in found if m and (directory / m.group(0)).is_dir())


def prune(root: str | Path, keep: int, protect: int | None = None) -> list[int]:
    """Delete all but the newest ``keep`` checkpoints under ``root`` (``--save-retain-count``),
    every role's part of each (rollout state and critic first, the policy's directory last, so a
    deletion cut short leaves no part without the policy's); never ``protect`` (the one the run
    resumed from) nor one newer than the ``latest`` pointer. Returns the rollout ids deleted."""
    latest = latest_checkpoint(root)
    if latest is None:
        return []
    complete = [r for r in saved_rollouts(root) if r <= int(latest.name[5:])]
    doomed = [r for r in complete[:-keep] if r != protect]
    for rollout_id in doomed:
        rollout_state_path(root, rollout_id).unlink(missing_ok=True)
        for role in sorted(ROLE_DIRS, key=lambda name: name == "policy"):
            part = role_dir(root, role) / f"iter_{rollout_id:07d}"
            if part.exists():
                shutil.rmtree(part)
    return doomed


def resume_checkpoint(config: Config, written_by: str = "an earlier run") -> Path | None:
    """The checkpoint a run resumes from under ``--load``: the latest, or with ``--ckpt-step N``
    (Megatron-LM's option) the one written after rollout N, which must be there. None without
    ``--load`` or while it holds no checkpoint (a fresh start)."""
    if not config.get("load"):
        return None
    latest = latest_checkpoint(config.load, written_by)
    step = config.get("ckpt_step")
    if step is None:
        return latest
    path = Path(config.load) / f"iter_{step:07d}"
    if not path.is_dir():
        held = sorted(p.name for p in Path(config.load).glob("iter_*") if p.is_dir() and not p.name.endswith(".tmp"))
        raise FileNotFoundError(
            f"--ckpt-step {step}: {config.load} holds no {path.name} (it holds "
            f"{', '.join(held) or 'no checkpoint'}); give the rollout of one of those, or leave "
            "out --ckpt-step to resume from the latest"
        )
    return path


def role_config(config: Config, role: str, start: int):
    """``config`` as the ranks of ``role`` (a PPO critic) read it: ``--save`` and ``--load`` at
    the role's place (`role_dir`), resuming the checkpoint of the rollout the policy resumed
    (``start - 1``; none when the policy starts fresh), and no ``--save-hf`` (the Hugging Face
    export is the policy's): a copy (`Config.replace`), ``config`` is left as it is."""
    return config.replace(
        save=str(role_dir(config.save, role)) if config.get("save") else None,
        load=str(role_dir(config.load, role)) if start > 0 else None,
        ckpt_step=start - 1 if start > 0 else None,
        save_hf=None,
    )


def missing_critic(config: Config) -> str | None:
    """The problem with resuming a PPO run from ``--load`` whose checkpoint has no critic: a run
    without PPO wrote it, or slime before the roles had their own places, whose critic then
    overwrote the policy's ``iter_*`` (refused: that checkpoint lost its policy)."""
    if config.get("advantage_estimator") != "ppo":
        return None
    path = resume_checkpoint(config)
    if path is None or (role_dir(config.load, "critic") / path.name).is_dir():
        return None
    return (
        f"--load {config.load}: the checkpoint {path.name} has no critic "
        f"({role_dir(config.load, 'critic') / path.name});\n"
        "  a run without --advantage-estimator ppo wrote it (start PPO from --hf-checkpoint instead), or a PPO run of "
        "an\n"
        "  earlier slime, whose critic overwrote the policy in the same directory: that one cannot be resumed"
    )


def is_megatron_checkpoint(path) -> bool:
    """Whether ``path`` is laid out as a Megatron checkpoint: a ``latest_checkpointed_iteration.txt``
    beside the checkpoints it points into (ours, Megatron-LM's, slime's ``--ref-load``)."""
    return bool(path) and (Path(path) / LATEST).is_file()


def starts_from_ref_load(config: Config) -> bool:
    """Whether the policy starts from ``--ref-load``'s weights, as in slime: when it is a
    Megatron checkpoint and ``--load`` holds none yet (slime then loads ``--ref-load`` as
    ``--load``, at rollout 0 with a fresh optimizer; its launch scripts give the same model
    as ``--hf-checkpoint``, which the engines start from). Both backends follow it."""
    return is_megatron_checkpoint(config.get("ref_load")) and resume_checkpoint(config) is None


def megatron_checkpoint(root) -> Path:
    """The checkpoint directory a Megatron checkpoint ``root`` points to: ``iter_0000003`` for
    the iteration ``3`` in its ``latest_checkpointed_iteration.txt``, ``release`` for
    ``release`` (what slime's tools/convert_hf_to_torch_dist.py writes). Shared with the
    backends, which load it; raises what is wrong with it."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: the directory does not exist")
    if not (root / LATEST).is_file():
        raise FileNotFoundError(f"{root} has no {LATEST}: not a Megatron checkpoint directory")
    pointer = (root / LATEST).read_text().strip()
    if pointer != "release" and not pointer.isdigit():
        raise ValueError(
            f"{root / LATEST} holds {pointer!r}, neither an iteration number nor 'release'; "
            "write the iteration of the checkpoint to load into it"
        )
    path = root / ("release" if pointer == "release" else f"iter_{int(pointer):07d}")
    if not (path / ".metadata").is_file():
        raise FileNotFoundError(
            f"{root / LATEST} names {path.name}, which holds no torch_dist checkpoint "
            "(.metadata); the checkpoint was not written completely, or was moved"
        )
    return path
