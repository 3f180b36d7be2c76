"""The checkpoint directory every train backend writes (``--save``) and resumes from (``--load``).

    DIR/iter_0000003/                       one checkpoint (after rollout 3), backend's format
    DIR/latest_checkpointed_iteration.txt   "3"

A checkpoint is written into ``iter_0000003.tmp`` (`staging`), renamed once every rank has
finished, and only then does the ``latest`` file name it (`publish`), so a crash mid-save
never leaves a checkpoint that looks complete: `latest_checkpoint` follows the ``latest``
file only. A run resumes from the latest, or from an earlier one with ``--ckpt-step``
(`resume_checkpoint`). The backends add the barriers around these steps (they need torch.distributed).

The same layout written by Megatron-LM (slime's ``--ref-load``, from its
tools/convert_hf_to_torch_dist.py, may point at ``release`` instead of an iteration) is read
by `megatron_checkpoint`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LATEST = "latest_checkpointed_iteration.txt"


def staging(root: str | Path, rollout_id: int) -> tuple[Path, Path]:
    """(final, tmp) directories of the checkpoint of ``rollout_id``."""
    final = Path(root) / f"iter_{rollout_id:07d}"
    return final, final.with_name(final.name + ".tmp")


def prepare(tmp: Path) -> None:
    """An empty ``tmp`` directory (one rank calls this, before the others write into it)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)


def publish(tmp: Path, final: Path, rollout_id: int) -> None:
    """Make the finished ``tmp`` the checkpoint of ``rollout_id`` and the latest (one rank
    calls this, after every rank has finished writing)."""
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    write_atomically(final.parent / LATEST, str(rollout_id))


def latest_checkpoint(root: str | Path, written_by: str = "an earlier run") -> Path | None:
    """The newest complete checkpoint under ``root``; None if it holds none yet. A ``root``
    that does not exist is an error (a typo must not silently start a fresh run)."""
    directory = Path(root)
    if not directory.is_dir():
        raise FileNotFoundError(f"--load {root}: the directory does not exist; give the --save directory of "
                                f"{written_by}, or drop --load to start from --hf-checkpoint")
    latest = directory / LATEST
    if not latest.is_file():
        return None
    path = directory / f"iter_{int(latest.read_text().strip()):07d}"
    if not path.is_dir():
        raise FileNotFoundError(f"{latest} names {path.name}, which is missing; the checkpoint directory was changed by hand")
    return path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s content at once (a reader sees the old text or the new, never half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def resume_checkpoint(config, written_by: str = "an earlier run") -> Path | None:
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
        raise FileNotFoundError(f"--ckpt-step {step}: {config.load} holds no {path.name} (it holds "
                                f"{', '.join(held) or 'no checkpoint'}); give the rollout of one of those, or leave "
                                "out --ckpt-step to resume from the latest")
    return path


def is_megatron_checkpoint(path) -> bool:
    """Whether ``path`` is laid out as a Megatron checkpoint: a ``latest_checkpointed_iteration.txt``
    beside the checkpoints it points into (ours, Megatron-LM's, slime's ``--ref-load``)."""
    return bool(path) and (Path(path) / LATEST).is_file()


def starts_from_ref_load(config) -> bool:
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
        raise ValueError(f"{root / LATEST} holds {pointer!r}, neither an iteration number nor 'release'; "
                         "write the iteration of the checkpoint to load into it")
    path = root / ("release" if pointer == "release" else f"iter_{int(pointer):07d}")
    if not (path / ".metadata").is_file():
        raise FileNotFoundError(f"{root / LATEST} names {path.name}, which holds no torch_dist checkpoint "
                                "(.metadata); the checkpoint was not written completely, or was moved")
    return path
