"""Which parameters a rank trains: ``--only-train-params-name-list`` and ``--freeze-params-name-list``.

As in THUDM slime, each pattern is a Python regex searched (``re.search``) in a parameter's
name as the backend's model names it (Hugging Face names in slime-fsdp, ``model.layers.0...``;
Megatron's in slime-megatron, ``decoder.layers.0...``, numbered per pipeline stage). With an
only-train list, every parameter that no pattern matches is frozen; then every parameter that
a freeze pattern matches is frozen. Frozen parameters get no gradient, so the optimizer never
moves them (no weight decay either) and checkpoints keep them as loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from slime_core.config.config import Config


def trainable(name: str, only: Iterable[str] | None, freeze: Iterable[str] | None) -> bool:
    """Whether the parameter ``name`` is trained under the ``only`` and ``freeze`` patterns."""
    if only and not any(re.search(pattern, name) for pattern in only):
        return False
    return not (freeze and any(re.search(pattern, name) for pattern in freeze))


def freeze_by_name(
    named_parameters: Iterable[tuple[str, torch.nn.Parameter]], config: Config, whole_model: bool = True
) -> list[str]:
    """Set ``requires_grad`` off on the parameters the config's patterns leave out (before the
    optimizer is built); the names frozen. ``whole_model``: the parameters are the whole model
    (not one pipeline stage's, which may rightly train nothing), which may not be left with
    nothing to train."""
    only, freeze = config.get("only_train_params_name_list"), config.get("freeze_params_name_list")
    named = list(named_parameters)
    if not (only or freeze):
        return []
    frozen = [name for name, param in named if param.requires_grad and not trainable(name, only, freeze)]
    for name, param in named:
        if name in frozen:
            param.requires_grad_(False)
    if whole_model and named and not any(param.requires_grad for _, param in named):
        examples = ", ".join(name for name, _ in named[:3])
        raise ValueError(
            f"--only-train-params-name-list {only} / --freeze-params-name-list {freeze} leave no parameter to "
            f"train; the patterns are searched in names such as {examples}: fix the patterns"
        )
    return frozen
