"""slime's `Sample`: our `slime_core.Sample` plus the fields and methods slime's user code uses.

It is a subclass, so a sample a slime function creates flows through our loop as it is. The
loop's own samples are promoted in place (`promote`) before a slime function sees them:
same object, same tokens, slime's extra fields added with their defaults. Its ``to_dict``
writes only the core's fields and keeps slime's non-default extras under
``metadata["slime"]``, so checkpoints and saved rollouts load with the core's
``Sample.from_dict`` and the extras come back on the next promotion.

``index`` is slime's: unique over the run (our data source counts the samples it hands out,
`slime_core.Sample.global_index`), while a core sample's ``index`` is its position in its
group. A slime `Sample` reads ``global_index`` (its position when it has none) and setting
``index`` sets both; ``to_dict`` writes each under its own key. ``group_index`` is the
group's, as in slime. slime's default loss mask (all ones over the response, for a sample
whose function left it None or empty) is filled by `fill_loss_mask`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from slime_core.engine import decode_int32s, version_number
from slime_core.routing_replay import routing_rows
from slime_core.sample import Sample as CoreSample
from slime_core.sample import SampleStatus

_CORE_FIELDS = {f.name for f in dataclasses.fields(CoreSample)}
_EXTRAS_KEY = "slime"  # metadata key that carries slime's extra fields through to_dict


@dataclass
class Sample(CoreSample):
    """A `slime_core.Sample` with slime's extra fields, ``Sample.Status`` and slime's helpers."""

    Status = SampleStatus  # slime spells it Sample.Status.COMPLETED; the values are the same strings

    rollout_id: int | None = None  # the rollout execution this training sample came from
    # slime's trainer input for the images (the processor's pixel_values, image_grid_thw, ...); the trainers here
    # compute the same from multimodal_inputs, which must hold every image shown (`slime_compat.generate`)
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    remove_sample: bool = False  # slime: drop from training (we zero the loss mask instead)
    generate_function_path: str | None = None  # per-sample --custom-generate-function-path
    custom_rm_path: str | None = None  # per-sample --custom-rm-path
    train_metadata: dict | None = None
    session_id: str | None = None

    @property
    def index(self) -> int | None:
        """slime's index: unique over the run (``global_index``), else the position in the group."""
        return self.__dict__["index"] if self.global_index is None else self.global_index

    @index.setter
    def index(self, value: int | None) -> None:
        # both: the dataclass __init__ sets index before global_index, and core code reads either
        self.__dict__["index"] = self.__dict__["global_index"] = value

    def get_reward_value(self, args) -> float:
        """The reward to train on: the reward, or ``reward[args.reward_key]`` for a dict reward."""
        key = getattr(args, "reward_key", None)
        return self.reward[key] if key else self.reward

    @property
    def effective_response_length(self) -> int:
        """Response tokens that are trained on (loss mask 1)."""
        return sum(self.loss_mask) if self.loss_mask else self.response_length

    def append_response_tokens(
        self,
        args=None,
        *,
        tokens=None,
        log_probs=None,
        trainable: bool = True,
        meta_info: dict | None = None,
        text: str | None = None,
        update_terminal_info: bool = True,
    ) -> None:
        """slime's way to grow a response, on our `append_response`: model tokens with their
        log-probs (and SGLang's ``meta_info``: weight version, finish reason), or tool tokens
        with ``trainable=False``."""
        if self.loss_mask is None:  # slime code may reset these to None before growing a response
            self.loss_mask = [1] * self.response_length
        if self.rollout_log_probs is None:
            self.rollout_log_probs = [0.0] * self.response_length
        meta_info = meta_info or {}
        version = meta_info.get("weight_version")
        self.append_response(
            [int(t) for t in (tokens or [])],
            log_probs=None if log_probs is None else list(log_probs),
            trainable=trainable,
            text=text or "",
            weight_version=None if version is None else version_number(str(version)),
        )
        self._append_routing(meta_info)
        finish = (meta_info.get("finish_reason") or {}).get("type")
        if update_terminal_info and finish:
            self.status = {"length": SampleStatus.TRUNCATED, "abort": SampleStatus.ABORTED}.get(
                finish, SampleStatus.COMPLETED
            )

    def _append_routing(self, meta_info: dict) -> None:
        """The routed experts SGLang answered (``routed_experts``, routing replay): one row per token
        fed from ``routed_experts_start_len`` on, which replace the rows recorded from there."""
        flat = decode_int32s(meta_info.get("routed_experts"))
        if flat is None:
            return
        start = int(meta_info.get("routed_experts_start_len") or 0)
        rows = routing_rows(flat, len(self.tokens) - 1 - start, self.describe())
        self.rollout_routed_experts = list(self.rollout_routed_experts or [])[:start] + rows

    def to_dict(self) -> dict[str, Any]:
        """The core's dict, slime's non-default extras under ``metadata["slime"]`` but
        ``multimodal_train_inputs``: the images' features are recomputed from ``multimodal_inputs``
        (which the dict holds) where they are needed, as the trainer does."""
        data = CoreSample.to_dict(self)
        data["index"] = self.__dict__["index"]  # the core's position (asdict read the property)
        extras = {name: data.pop(name) for name in list(data) if name not in _CORE_FIELDS}
        extras.pop("multimodal_train_inputs")  # tensors; the images they come from are multimodal_inputs
        changed = {name: value for name, value in extras.items() if value != _default(name)}
        if changed:
            data["metadata"] = {**data["metadata"], _EXTRAS_KEY: changed}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Inverse of `to_dict`; also takes slime's own dicts (extras as top-level keys)."""
        core = CoreSample.from_dict({k: v for k, v in data.items() if k in _CORE_FIELDS})
        sample = promote(core)
        for name, value in data.items():
            if name not in _CORE_FIELDS:
                setattr(sample, name, value)
        return sample


_EXTRA_FIELDS = [f for f in dataclasses.fields(Sample) if f.name not in _CORE_FIELDS]


def _default(name: str) -> Any:
    f = next(f for f in _EXTRA_FIELDS if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def promote(sample: CoreSample) -> Sample:
    """Make a core sample a slime `Sample` in place (the loop keeps the same object) and
    restore extras an earlier `Sample.to_dict` kept in its metadata."""
    if type(sample) is CoreSample:
        sample.__class__ = Sample
        for f in _EXTRA_FIELDS:
            sample.__dict__.setdefault(f.name, _default(f.name))
        extras = sample.metadata.get(_EXTRAS_KEY, {})
        if extras:  # a new dict: the metadata may be shared with the dict the sample was loaded from
            sample.metadata = {key: value for key, value in sample.metadata.items() if key != _EXTRAS_KEY}
        for name, value in extras.items():
            setattr(sample, name, value)
    return sample


def promote_all(samples):
    """`promote` every sample of a list, or of a list of groups; returns its argument."""
    for item in samples:
        promote_all(item) if isinstance(item, list) else promote(item)
    return samples


def fill_loss_mask(samples):
    """slime's default for samples a user function built: a loss mask left None (slime's
    default) or empty becomes all ones over the response, as slime's train-data conversion
    does. Takes a sample, a list or a list of groups; returns its argument."""
    for sample in samples if isinstance(samples, list) else [samples]:
        if isinstance(sample, list):
            fill_loss_mask(sample)
        elif not sample.loss_mask:  # None (slime's default) or never grown (ours)
            sample.loss_mask = [1] * sample.response_length
    return samples
