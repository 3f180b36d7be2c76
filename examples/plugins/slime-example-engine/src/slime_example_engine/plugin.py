"""The plugin module slime loads through the entry point: it registers the rollout backend.
It imports nothing heavy (``slime --help`` imports every plugin module); the backend's
module is named by a string and imported when a run selects it."""

from slime_core import hookimpl


@hookimpl
def slime_register_rollout_backends(register):
    register("hf-inprocess", "slime_example_engine.backend:backend")
