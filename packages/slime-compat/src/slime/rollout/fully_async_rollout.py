"""slime.rollout.fully_async_rollout: asynchronous training is native here.

The module imports so code that names it loads. Named with ``--rollout-function-path``, its
function selects our default rollout in ``--train-mode async`` (generation overlapping
training, with a bounded staleness); called from your own code it raises saying so.
"""

__all__ = ["generate_rollout_fully_async"]


def generate_rollout_fully_async(args, rollout_id, data_buffer, evaluation=False):
    """Not run here: raises with the native way."""
    raise RuntimeError(
        "slime's fully asynchronous rollout is not called here: name it with --rollout-function-path (it selects "
        "our default rollout with --train-mode async), or run with --train-mode async"
    )
