"""slime.utils.http_utils: ``await post(url, payload)`` / ``await get(url)`` (see `slime_compat.http`),
and ``get_rollout_num_engines(args)``."""

from slime_compat.http import get, post

__all__ = ["get", "get_rollout_num_engines", "post"]


def get_rollout_num_engines(args) -> int:
    """How many rollout engines serve the run: ``args.rollout_num_engines`` when set, else the
    rollout GPUs over the GPUs per engine (at least 1 engine when there are rollout GPUs, 0 without)."""
    if getattr(args, "rollout_num_engines", None) is not None:
        return int(args.rollout_num_engines)
    gpus = getattr(args, "rollout_num_gpus", None) or 0
    per_engine = getattr(args, "rollout_num_gpus_per_engine", None) or 1
    return max(1, gpus // per_engine) if gpus > 0 else 0
