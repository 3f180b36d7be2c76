"""The train ranks' profilers: THUDM slime's ``--profile-target`` phases and memory recorder.

With ``--use-pytorch-profiler`` each targeted phase gets a ``torch.profiler`` whose schedule
is slime's: skip ``max(start - 1, 0)`` steps, warm up one when ``--profile-step-start`` is
above 0, record until ``--profile-step-end``, once. The trace is written when the window
closes, or when the phase ends inside it, as ``<target>_rank_<r>.<time>.pt.trace.json.gz`` in
``<output-dir>/tensorboard`` (slime writes them to its TensorBoard directory too), where
TensorBoard's profiler plugin and Perfetto read them. A step is:

- ``train_overall``: one rollout (the profiler runs from the end of the rank's ``init``);
- ``train_actor``: one micro-batch of a rollout's training (a profiler per rollout);
- ``train_log_probs``: one micro-batch of a log-prob pass (actor, reference or teacher; a
  profiler per pass).

With ``--record-memory-history`` (and train_overall targeted, as in slime) the rank records its
allocations from its start and dumps them once rollout ``--memory-snapshot-num-steps - 1`` has
trained, to ``--memory-snapshot-dir`` (relative: under the run directory) as
``memory_snapshot_time<t>_rank<r>_<--memory-snapshot-path>``. ``--memory-recorder torch``
records the CUDA caching allocator (torch.cuda.memory._record_memory_history, also dumped on a
CUDA out-of-memory error); on a CPU rank it has nothing to record and says so.
``--memory-recorder memray`` records the process's host allocations (CPU or GPU ranks).
A PPO critic's ranks profile their own training the same way (train_overall, their memory),
with ``critic_`` before the file names.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from slime_core.config.config import Config


class TrainProfiler:
    """One rank's profilers; every method does nothing for a phase that is not profiled."""

    def __init__(self, config: Config, rank: int, device: torch.device, role: str = "actor"):
        self.config, self.rank, self.device = config, rank, device
        self.prefix = "" if role == "actor" else f"{role}_"
        self.trace_dir = Path(config.get("output_dir") or ".") / "tensorboard"
        self._phases: dict[str, Any] = {}  # the running profiler of each phase
        self._memory: MemoryRecorder | None = None
        if config.get("record_memory_history") and "train_overall" in config.profile_target:
            self._memory = MemoryRecorder(config, f"{self.prefix}rank{rank}", device)
            self._memory.start()

    def traced(self, target: str) -> bool:
        return bool(self.config.get("use_pytorch_profiler")) and target in self.config.profile_target

    def started(self) -> None:
        """The rank has loaded its model: the train_overall profiler starts."""
        self.begin("train_overall")

    def begin(self, target: str) -> None:
        """A phase starts: a new profiler for it, if targeted."""
        if self.traced(target):
            self._phases[target] = self._profiler(target)
            self._phases[target].start()

    def tick(self, target: str) -> None:
        """One step of the phase is done."""
        if target in self._phases:
            self._phases[target].step()

    def end(self, target: str) -> None:
        """The phase is over: its trace is written if its window was recording."""
        profiler = self._phases.pop(target, None)
        if profiler is not None:
            profiler.stop()

    def finish_rollout(self, rollout_id: int) -> None:
        """Rollout ``rollout_id`` has trained: a train_overall step, and the memory snapshot when due."""
        self.tick("train_overall")
        steps = self.config.get("memory_snapshot_num_steps")
        if self._memory is not None and steps is not None and rollout_id == steps - 1:
            self._memory.stop()
            self._memory = None

    def _profiler(self, target: str):
        cfg = self.config
        start, end = cfg.profile_step_start, cfg.profile_step_end
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        return torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=max(start - 1, 0), warmup=1 if start > 0 else 0, active=end - start, repeat=1
            ),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                str(self.trace_dir), worker_name=f"{self.prefix}{target}_rank_{self.rank}", use_gzip=True
            ),
            record_shapes=True,
            with_stack=True,
            profile_memory=True,
            with_flops=True,
        )


class MemoryRecorder:
    """``--memory-recorder``'s record of one rank's allocations, from `start` to `stop` (the dump)."""

    def __init__(self, config: Config, rank: str, device: torch.device):
        """``rank``: the rank's name in the file name (``rank0``, ``critic_rank0``)."""
        directory = Path(config.memory_snapshot_dir)
        if not directory.is_absolute():
            directory = Path(config.get("output_dir") or ".") / directory
        directory.mkdir(parents=True, exist_ok=True)
        name = f"memory_snapshot_time{time.time()}_{rank}_{config.memory_snapshot_path}"
        self.path, self.kind, self.device = directory / name, config.memory_recorder, device
        self._tracker: Any = None

    def start(self) -> None:
        if self.kind == "memray":
            import memray

            self._tracker = memray.Tracker(file_name=str(self.path), native_traces=True)
            self._tracker.__enter__()
        elif self.device.type != "cuda":
            print(
                "slime: warning: --record-memory-history with --memory-recorder torch records CUDA allocations, and "
                "this train rank runs on the CPU: no snapshot is written (--memory-recorder memray records host "
                "memory)",
                file=sys.stderr,
                flush=True,
            )
        else:
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="all")
            torch._C._cuda_attach_out_of_memory_observer(lambda *args: self._dump())
            self._tracker = torch.cuda.memory

    def stop(self) -> None:
        """Write the record to `path` and stop recording."""
        if self._tracker is None:
            return
        if self.kind == "memray":
            self._tracker.__exit__(None, None, None)
        else:
            self._dump()
            torch.cuda.memory._record_memory_history(enabled=None)
        self._tracker = None

    def _dump(self) -> None:
        torch.cuda.memory._dump_snapshot(str(self.path))
