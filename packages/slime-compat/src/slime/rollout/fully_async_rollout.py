"""slime.rollout.fully_async_rollout: asynchronous training is native here.

The module imports so code that names it loads; generation that overlaps training, with a
bounded staleness, is ``slime run --train-mode async`` (or ``--async``), and naming this
module's function with ``--rollout-function-path`` is a config error that says so.
"""

from slime_compat.hooks import NATIVE_INSTEAD

__all__ = ["generate_rollout_fully_async"]


def generate_rollout_fully_async(args, rollout_id, data_buffer, evaluation=False):
    """Not run here: raises with the native way."""
    raise RuntimeError(NATIVE_INSTEAD["rollout_function_path", f"{__name__}.generate_rollout_fully_async"])
