"""Checkpoints in Megatron's distributed format (``megatron.core.dist_checkpointing``,
torch_dist), written atomically and loadable by a different number of ranks.

Layout under ``--save DIR``::

    DIR/iter_0000003/                    one checkpoint (after rollout 3)
        metadata.json, .metadata, *.distcp   model (+ optimizer) shards, by megatron
        slime.json                       {"rollout_id": 3, "has_optimizer": true, "world_size": 2}
        extra_rank_0.pt, ...             each rank's extras (counters, RNG states), torch.save
    DIR/latest_checkpointed_iteration.txt   "3"

Every rank writes into ``iter_0000003.tmp``; rank 0 publishes it, durably, once all have
finished (`slime_core.checkpoint.directory`, shared with the FSDP backend), so a crash mid-save never
leaves a checkpoint that looks complete. Every pickled file is read back through allow-lists
(`slime_core.checkpoint.safety`): a checkpoint runs no code it carries. The model and the distributed optimizer are
saved fully resharded (any tensor-,
pipeline- or data-parallel layout can load them); a rank that had no twin when saving gets
rank 0's extras.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from slime_core.checkpoint.directory import confirm_written, durable_file, prepare, publish, staging
from slime_core.checkpoint.safety import dcp_failures_raised, guarded_dcp_reads, load_torch_file
from slime_megatron.models.weights import model_chunks

META = "slime.json"
#: How the distributed optimizer's state is laid out: reshardable to any parallel layout,
#: gathered over gloo (works on CPU and GPU alike).
OPTIMIZER_METADATA = {
    "distrib_optim_sharding_type": "fully_reshardable",
    "distrib_optim_fully_reshardable_mem_efficient": True,
}


def save_checkpoint(root: str, rollout_id: int, model, optimizer=None, extra: dict | None = None) -> Path:
    """Write the checkpoint of ``rollout_id`` under ``root``; a collective over every rank.

    ``model`` is a GPTModel (wrapped or not); ``optimizer`` a megatron optimizer or None;
    ``extra`` this rank's small state (anything ``torch.save`` takes). Returns the directory.
    """
    from megatron.core import dist_checkpointing

    final, tmp = staging(root, rollout_id)
    _collect_write_results_in_process()
    if dist.get_rank() == 0:
        prepare(tmp)
    dist.barrier()
    failure = None
    try:
        with dcp_failures_raised(f"writing {tmp}"):
            dist_checkpointing.save(_sharded_state(model, optimizer, is_loading=False), str(tmp))
        with durable_file(tmp / f"extra_rank_{dist.get_rank()}.pt") as file:
            torch.save(extra or {}, file)
    except Exception as exc:  # noqa: BLE001 - every rank learns of it in confirm_written
        failure = exc
    confirm_written(tmp, failure)
    if dist.get_rank() == 0:
        meta = {"rollout_id": rollout_id, "has_optimizer": optimizer is not None, "world_size": dist.get_world_size()}
        (tmp / META).write_text(json.dumps(meta))
        publish(tmp, final, rollout_id)
    dist.barrier()
    return final


def _collect_write_results_in_process() -> None:
    """Give megatron's checkpoint writer an in-process queue for its write results. It makes
    one for an asynchronous save, whose writing runs in another process: a queue served by a
    spawned multiprocessing Manager, a fresh interpreter that cost ~2 s of each rank process's
    first save. slime saves synchronously, in the rank's own process, where a plain queue does."""
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", False) is None:
        filesystem_async._results_queue = queue.Queue()


#: What a ``--load`` directory's checkpoints come from, for its errors.
WRITTEN_BY = "an earlier run (or of slime convert hf-to-megatron)"


def load_checkpoint(path, model, optimizer=None) -> dict:
    """Restore ``model`` (and ``optimizer``, if given and the checkpoint has its state) in
    place from ``path``; a collective. Returns this rank's extras.

    A model-only checkpoint (``slime convert hf-to-megatron``) leaves the optimizer as it is.
    """
    from megatron.core import dist_checkpointing

    path = Path(path)
    meta = json.loads((path / META).read_text())
    if not meta["has_optimizer"]:
        optimizer = None
    if optimizer is not None:
        _ensure_optimizer_state(optimizer)
    guarded_dcp_reads()
    with dcp_failures_raised(f"loading {path}"):
        state = dist_checkpointing.load(
            _sharded_state(model, optimizer, is_loading=True), str(path), common_strategy=allow_listed_common()
        )
    for chunk, key in zip(model_chunks(model), _chunk_keys(model)):
        chunk.load_state_dict(state[key])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    own = path / f"extra_rank_{dist.get_rank()}.pt"
    return load_torch_file(own if own.is_file() else path / "extra_rank_0.pt")


def allow_listed_common():
    """megatron's common-state loader, reading ``common.pt`` with the allow-list
    (`load_torch_file`), which names the file it refuses (megatron reads sharded objects with
    ``torch.load``'s default, ``weights_only=True``)."""
    import os

    from megatron.core.dist_checkpointing.strategies.common import COMMON_STATE_FNAME, TorchCommonLoadStrategy

    class AllowListed(TorchCommonLoadStrategy):
        def load_common(self, checkpoint_dir):
            return load_torch_file(os.path.join(checkpoint_dir, COMMON_STATE_FNAME))

    return AllowListed()


def _ensure_optimizer_state(optimizer) -> None:
    """Prepare a distributed optimizer over torch's Adam (no Transformer Engine or Apex)
    for loading, which megatron-core 0.16.1 supports only for their fused Adam:

    - one that has not stepped yet gets its state (zeros): ``sharded_state_dict`` reads the
      step count from it, and torch's Adam creates it only on the first step;
    - the fully reshardable load copies every state tensor of a parameter, ``step`` too,
      from tensors that hold no ``step``: keep the step the load has already restored, in
      a tensor of the parameter's own (the load gives every parameter the same one, which
      torch's Adam then increments once per parameter on the next step).
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    _keep_step_on_load(DistributedOptimizer)
    for part in getattr(optimizer, "chained_optimizers", [optimizer]):
        if isinstance(part, DistributedOptimizer) and not part.optimizer.state:
            part._init_optimizer_states_with_dummy_values()


def _keep_step_on_load(cls) -> None:
    original = cls._set_main_param_and_optimizer_states
    if getattr(original, "keeps_step", False):
        return

    def set_states(self, model_param, tensors):
        group_index, group_order = self.model_param_group_index_map[model_param]
        state = self.optimizer.state[self.optimizer.param_groups[group_index]["params"][group_order]]
        if "step" in state and "step" not in tensors:
            state["step"] = state["step"].clone()  # one per parameter (see the docstring)
            tensors = {**tensors, "step": state["step"]}
        return original(self, model_param, tensors)

    set_states.keeps_step = True
    cls._set_main_param_and_optimizer_states = set_states


def _chunk_keys(model) -> list[str]:
    """The checkpoint's key of each model chunk: ``model``, or with virtual pipeline stages
    ``model0``, ``model1``, ... (Megatron-LM's keys)."""
    chunks = model_chunks(model)
    return ["model"] if len(chunks) == 1 else [f"model{i}" for i in range(len(chunks))]


def _sharded_state(model, optimizer, is_loading: bool) -> dict:
    state = {key: chunk.sharded_state_dict() for chunk, key in zip(model_chunks(model), _chunk_keys(model))}
    if optimizer is not None:
        model_state = state["model"] if "model" in state else dict(state)
        state["optimizer"] = optimizer.sharded_state_dict(
            model_state, is_loading=is_loading, metadata=OPTIMIZER_METADATA
        )
    return state
