"""slime's test kit, for the tests of slime's packages and of third-party plugins.

- fixtures: `slime_core.testing.pytest_plugin`, which pytest loads by itself wherever slime-core
  is installed (``ray_cluster``, ``tiny_model_dir``, ``rank_pool``, ``fake_run``, ``install_plugin``);
- fakes: `fakes` (a train backend, a rollout backend and a router named ``fake``, registered
  through the public hooks) and `driver` (``slime run`` on them, in this process);
- helpers: `config` (a resolved run config), `plugins` (a plugin installed and light),
  `rollouts` (``RolloutSamples``: a plugin keeping every rollout's samples for a test's asserts),
  `batches` (train data without an engine), `models` (reference log-probs), `train_backend`
  (checks a train backend passes), `ray` (a local Ray session), `processes` and `files` (what a
  run left running or wrote), `payloads` (a hostile checkpoint).

Each name is also importable from here. Nothing heavy is imported until it is used.
"""

from slime_core.testing.batches import synthetic_rollout_batch
from slime_core.testing.config import make_config
from slime_core.testing.driver import FAKE_FLAGS, run_on_fakes, write_addition_prompts
from slime_core.testing.fakes import FakeBackendsPlugin, Recorder
from slime_core.testing.files import files_holding
from slime_core.testing.models import log_probs_alone
from slime_core.testing.payloads import PicklePayload
from slime_core.testing.plugins import HEAVY_MODULES, PluginSites, check_plugin_installed
from slime_core.testing.processes import alive, command_line, descendants, processes_running
from slime_core.testing.ray import ray_session
from slime_core.testing.rollouts import RolloutSamples
from slime_core.testing.train_backend import (
    RESUME_METRICS,
    actor_and_reference_log_probs,
    check_gpu_train_step,
    check_rank_resume,
    check_teacher_temperature,
    destroy_default_group,
    train_one_rollout,
)

__all__ = [
    "FAKE_FLAGS",
    "HEAVY_MODULES",
    "RESUME_METRICS",
    "FakeBackendsPlugin",
    "PicklePayload",
    "PluginSites",
    "Recorder",
    "RolloutSamples",
    "actor_and_reference_log_probs",
    "alive",
    "check_gpu_train_step",
    "check_plugin_installed",
    "check_rank_resume",
    "check_teacher_temperature",
    "command_line",
    "descendants",
    "destroy_default_group",
    "files_holding",
    "log_probs_alone",
    "make_config",
    "processes_running",
    "ray_session",
    "run_on_fakes",
    "synthetic_rollout_batch",
    "train_one_rollout",
    "write_addition_prompts",
]
