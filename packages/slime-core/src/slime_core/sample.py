"""`Sample`: one trajectory, from prompt to reward, as it moves through the loop.

A sample is created by the data source (prompt, label, metadata), filled by the rollout
(tokens, response, log-probs, weight versions, status), scored by the reward hub (reward)
and consumed by the train backend. Response-level lists (``loss_mask``,
``rollout_log_probs``) always have ``response_length`` entries, and the top-p nuclei, once
recorded, ``response_length + 1`` offsets; ``append_response`` is the one way to grow a
response and keeps every length consistent.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class SampleStatus(str, enum.Enum):
    """Where a sample is in its life; the value is what `to_dict` writes."""

    PENDING = "pending"  # not generated yet, or partially generated (partial rollout)
    COMPLETED = "completed"  # the model stopped by itself (EOS or a stop string)
    TRUNCATED = "truncated"  # hit the response-length limit
    ABORTED = "aborted"  # generation was cancelled (enough groups done, shutdown)
    FAILED = "failed"  # generation or reward failed; `error` says why; not trained on


@dataclass
class Sample:
    """One trajectory.

    Token-level fields are plain lists so samples cross process boundaries cheaply.
    """

    group_index: int | None = None  # which prompt group this sample belongs to
    index: int | None = None  # position within its group (0..n_samples_per_prompt-1)
    global_index: int | None = None  # unique over the run, counted by the data source (slime's Sample.index)
    prompt: str | list[dict[str, Any]] = ""  # text, or chat messages [{"role", "content"}]
    tokens: list[int] = field(default_factory=list)  # (prompt_len + response_len,) token ids
    response: str = ""  # decoded response text (model output and tool/env text)
    response_length: int = 0  # number of response tokens at the end of `tokens`
    label: Any = None  # reference answer for the reward function
    reward: float | dict[str, Any] | None = None  # scalar, or a dict reduced by --reward-key
    loss_mask: list[int] = field(default_factory=list)  # (response_len,) 1 = trained on
    rollout_log_probs: list[float] = field(default_factory=list)  # (response_len,) engine log-probs
    weight_versions: list[int] = field(default_factory=list)  # weight versions that generated it
    # Top-p replay (--rollout-top-p < 1): the nucleus each response token was drawn from, so
    # training scores it over the same tokens. Token t's is
    # rollout_top_p_token_ids[offsets[t]:offsets[t + 1]]; an empty one (tool output) means
    # none, the whole vocabulary. None: no nucleus recorded.
    rollout_top_p_token_ids: list[int] | None = None  # nuclei ids, concatenated
    rollout_top_p_token_offsets: list[int] | None = None  # (response_len + 1,) offsets[0] = 0
    # On-policy distillation with the teacher's log-probs carried by the sample (slime's --rm-url teacher: a reward
    # post-process sets them from a teacher engine's answer), trained on with --opd-kl-coef; None: none carried.
    teacher_log_probs: list[float] | None = None  # (response_len,) log π_teacher of each response token
    # Routing replay (--use-rollout-routing-replay): the experts the engine routed each token to, one row
    # per token it fed (all but the last), each num_layers × top_k ids (`slime_core.routing_replay`); else None.
    rollout_routed_experts: list[list[int]] | None = None  # (len(tokens) - 1,) (num_layers * top_k,)
    status: SampleStatus = SampleStatus.PENDING
    error: str | None = None  # why the sample failed (status FAILED)
    metadata: dict[str, Any] = field(default_factory=dict)  # free-form, from data and plugins
    # The prompt's images and videos (slime's field): {"images": [PIL image or data URL, ...],
    # "videos": [[frame, ...], ...]} in prompt order, the types present; `to_dict` writes them as
    # PNG data URLs. None: a text-only prompt.
    multimodal_inputs: dict[str, list[Any]] | None = None

    def describe(self) -> str:
        """How messages name this sample: group/index, its index over the run, and the data
        file:line its prompt came from (``metadata["source"]``, set by the prompt dataset)."""
        name = f"sample {self.group_index}/{self.index}"
        if self.global_index is not None:
            name += f" (#{self.global_index})"
        source = self.metadata.get("source")
        return f"{name} of the prompt at {source}" if source else name

    @property
    def prompt_length(self) -> int:
        """Number of prompt tokens at the start of `tokens`."""
        return len(self.tokens) - self.response_length

    def append_response(
        self,
        tokens: list[int],
        *,
        log_probs: list[float] | None = None,
        trainable: bool = True,
        text: str = "",
        weight_version: int | None = None,
        top_p_token_ids: list[int] | None = None,
        top_p_token_offsets: list[int] | None = None,
    ) -> None:
        """Append response tokens and keep tokens, mask, log-probs and lengths consistent.

        Model output is ``trainable`` (loss mask 1) and must come with one log-prob per
        token. Tool or environment output is not trainable: it gets loss mask 0 and
        log-prob 0.0, so it shapes the context without being trained on.

        ``top_p_token_ids`` / ``top_p_token_offsets``: the tokens' nuclei from the engine (top-p
        replay, offsets from 0, one more than the tokens). Tokens appended without them get
        empty nuclei once the sample has recorded any.
        """
        tokens = list(tokens)
        if not trainable:
            log_probs = [0.0] * len(tokens)
        elif log_probs is None or len(log_probs) != len(tokens):
            got = "none" if log_probs is None else len(log_probs)
            raise ValueError(
                f"append_response: {len(tokens)} trainable tokens need as many log-probs, got {got}; "
                "pass log_probs from the engine, or trainable=False for tool/environment tokens"
            )
        self._append_nuclei(len(tokens), top_p_token_ids, top_p_token_offsets)
        self.tokens.extend(tokens)
        self.response_length += len(tokens)
        self.response += text
        self.loss_mask.extend([1 if trainable else 0] * len(tokens))
        self.rollout_log_probs.extend(log_probs)
        if weight_version is not None and weight_version not in self.weight_versions:
            self.weight_versions.append(weight_version)

    def _append_nuclei(self, count: int, ids: list[int] | None, offsets: list[int] | None) -> None:
        """Extend the recorded nuclei by ``count`` tokens' (empty ones when none are given);
        the first nuclei given start the record, with empty ones for the tokens before."""
        recorded_ids, recorded_offsets = self.rollout_top_p_token_ids, self.rollout_top_p_token_offsets
        if ids is None and offsets is None:
            if recorded_ids is not None and recorded_offsets is not None:
                recorded_offsets.extend([len(recorded_ids)] * count)
            return
        problem = _offsets_problem(ids, offsets, count)
        if problem or ids is None or offsets is None:
            raise ValueError(
                f"sample {self.group_index}/{self.index}: the engine's top-p nuclei do not fit its "
                f"{count} tokens: {problem}; is the engine's top-p replay broken?"
            )
        if recorded_ids is None or recorded_offsets is None:
            recorded_ids, recorded_offsets = [], [0] * (self.response_length + 1)
            self.rollout_top_p_token_ids, self.rollout_top_p_token_offsets = recorded_ids, recorded_offsets
        base = len(recorded_ids)
        recorded_ids.extend(ids)
        recorded_offsets.extend(base + offset for offset in offsets[1:])

    def check(self) -> None:
        """Raise ValueError if the length invariants do not hold."""
        problems = []
        if not 0 <= self.response_length <= len(self.tokens):
            problems.append(f"response_length {self.response_length} outside 0..{len(self.tokens)} tokens")
        for name in ("loss_mask", "rollout_log_probs", "teacher_log_probs"):
            if getattr(self, name) is not None and len(getattr(self, name)) != self.response_length:
                problems.append(
                    f"{name} has {len(getattr(self, name))} entries for {self.response_length} response tokens"
                )
        if self.rollout_top_p_token_ids is not None or self.rollout_top_p_token_offsets is not None:
            nuclei = _offsets_problem(
                self.rollout_top_p_token_ids, self.rollout_top_p_token_offsets, self.response_length
            )
            if nuclei:
                problems.append(f"rollout_top_p_token_offsets: {nuclei}")
        if problems:
            raise ValueError(f"sample {self.group_index}/{self.index} is inconsistent: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (status as its string value)."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        if self.multimodal_inputs:
            from slime_core.multimodal.images import encode_image
            from slime_core.multimodal.videos import encode_video

            encode = {"videos": encode_video}
            data["multimodal_inputs"] = {
                k: [encode.get(k, encode_image)(i) for i in v] for k, v in self.multimodal_inputs.items()
            }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        """Inverse of `to_dict`; unknown keys are an error, not silently dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Sample.from_dict: unknown keys {unknown}; known keys are {sorted(known)}")
        data = dict(data)
        if "status" in data:
            data["status"] = SampleStatus(data["status"])
        return cls(**data)


def _offsets_problem(ids: list[int] | None, offsets: list[int] | None, count: int) -> str | None:
    """What is wrong with ``offsets`` into ``ids`` as the nuclei of ``count`` tokens, or None."""
    if ids is None or offsets is None:
        return f"{'ids' if ids is None else 'offsets'} missing (nuclei need both)"
    if len(offsets) != count + 1:
        return f"{len(offsets)} offsets for {count} tokens (need one more than the tokens)"
    if offsets[0] != 0 or offsets[-1] != len(ids):
        return f"offsets run from {offsets[0]} to {offsets[-1]}, not from 0 to the {len(ids)} ids"
    if any(b < a for a, b in zip(offsets, offsets[1:])):
        return "offsets decrease"
    return None
