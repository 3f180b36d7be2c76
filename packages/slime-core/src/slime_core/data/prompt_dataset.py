"""Turning data-file records into prompt samples: keys, chat templates, length filtering."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slime_core.data.records import DataError, read_records
from slime_core.data.slicing import split_path_slice
from slime_core.multimodal.prompts import PromptMedia, parse_multimodal_keys
from slime_core.sample import Sample

if TYPE_CHECKING:
    from slime_core.config import Config

logger = logging.getLogger("slime.data")


@dataclass
class PromptFormat:
    """Which record keys hold what, and how prompts are rendered (slime's option names)."""

    input_key: str = "prompt"
    label_key: str | None = "label"
    metadata_key: str | None = "metadata"
    tool_key: str | None = "tools"
    apply_chat_template: bool = False
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_prompt_len: int | None = None  # in tokens; longer prompts are dropped and counted
    max_prompt_len_flag: str = "--rollout-max-prompt-len"  # the option that set it, for messages
    multimodal_keys: dict[str, str] | None = None  # media type -> record key (``{"image": "images"}``)

    @classmethod
    def from_config(cls, config: Config) -> PromptFormat:
        """From slime's options (``--input-key``, ``--apply-chat-template``, ...)."""
        return cls(
            input_key=config.input_key,
            label_key=config.label_key or None,
            metadata_key=config.metadata_key or None,
            tool_key=config.tool_key or None,
            apply_chat_template=config.apply_chat_template,
            chat_template_kwargs=chat_template_kwargs(config),
            max_prompt_len=config.rollout_max_prompt_len,
            multimodal_keys=multimodal_keys(config),
        )


def multimodal_keys(config: Config) -> dict[str, str] | None:
    """``--multimodal-keys`` as a dict (None: text prompts); a malformed one is reported by the
    config check (`slime_core.multimodal.checks`)."""
    try:
        return parse_multimodal_keys(getattr(config, "multimodal_keys", None))
    except ValueError:
        return None


def chat_template_kwargs(config: Config) -> dict[str, Any]:
    """``--apply-chat-template-kwargs`` as a dict: slime passes it to every ``apply_chat_template``
    call (e.g. ``{"enable_thinking": false}`` for Qwen3's template)."""
    if chat_template_kwargs_problems(config):
        return {}  # reported by the config check
    raw = getattr(config, "apply_chat_template_kwargs", None) or "{}"
    return dict(json.loads(raw)) if isinstance(raw, str) else dict(raw)


def chat_template_kwargs_problems(config: Config) -> list[str]:
    """``--apply-chat-template-kwargs`` that is not a JSON object."""
    raw = getattr(config, "apply_chat_template_kwargs", None) or "{}"
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return [f"--apply-chat-template-kwargs is not JSON ({exc.msg} at column {exc.colno}): {raw!r}"]
    if not isinstance(value, dict):
        return [
            f"--apply-chat-template-kwargs must be a JSON object, e.g. '{{\"enable_thinking\": false}}'; got {raw!r}"
        ]
    return []


def check_record(where: str, record: dict[str, Any], fmt: PromptFormat) -> None:
    """Raise `DataError` naming ``where`` if ``record`` lacks the prompt (text or chat
    messages) or the label that ``fmt`` asks for."""
    if fmt.input_key not in record:
        raise DataError(
            f"{where}: no '{fmt.input_key}' key (keys: {', '.join(record)}); set --input-key to the prompt's key"
        )
    prompt = record[fmt.input_key]
    if not isinstance(prompt, (str, list)):
        raise DataError(
            f"{where}: '{fmt.input_key}' must be text or a list of chat messages, got {type(prompt).__name__}"
        )
    if fmt.label_key and fmt.label_key not in record:
        raise DataError(
            f"{where}: no '{fmt.label_key}' key (keys: {', '.join(record)}); set --label-key, or --label-key '' for "
            "none"
        )
    if fmt.multimodal_keys:
        record_images(where, record, fmt)


def record_images(where: str, record: dict[str, Any], fmt: PromptFormat) -> tuple[list[dict], PromptMedia]:
    """The record's prompt as chat messages with image and video parts, and its decoded images and
    videos (``--multimodal-keys``); `DataError` naming ``where`` for a missing or undecodable one."""
    from slime_core.multimodal.images import ImageError
    from slime_core.multimodal.prompts import multimodal_messages

    assert fmt.multimodal_keys is not None
    try:
        return multimodal_messages(record[fmt.input_key], record, fmt.multimodal_keys, where)
    except ImageError as exc:
        raise DataError(str(exc)) from None


class PromptDataset:
    """The prompts of one data file (or a slice of it), as template `Sample`s.

    With a tokenizer, each prompt is tokenized once here (``sample.tokens``), which is also
    how over-long prompts are found. The checks before start-up load the run's datasets
    (`checked`) and the run takes them over (`load`), so prompts are tokenized once.
    """

    #: datasets loaded by the checks before start-up, until the run takes them (`load`)
    _checked: dict[tuple[str, str], PromptDataset] = {}

    @classmethod
    def checked(cls, spec: str, fmt: PromptFormat, tokenizer) -> PromptDataset:
        """Load ``spec`` for the checks before start-up, and keep it for the run's `load`."""
        dataset = cls(spec, fmt, tokenizer)
        cls._checked[(spec, repr(fmt))] = dataset
        return dataset

    @classmethod
    def load(cls, spec: str, fmt: PromptFormat, tokenizer=None) -> PromptDataset:
        """The dataset the checks loaded with the same format and tokenizer, else a new one."""
        dataset = cls._checked.pop((spec, repr(fmt)), None)
        if dataset is not None and dataset.tokenizer is tokenizer:
            return dataset
        return cls(spec, fmt, tokenizer)

    def __init__(self, spec: str, fmt: PromptFormat, tokenizer=None):
        path, part = split_path_slice(spec)
        self.path = path
        self.format = fmt
        self.tokenizer = tokenizer
        if (fmt.apply_chat_template or fmt.max_prompt_len) and tokenizer is None:
            raise ValueError(
                "a tokenizer is needed to apply the chat template or to filter by --rollout-max-prompt-len"
            )
        self.processor = _processor(tokenizer, fmt.multimodal_keys) if fmt.multimodal_keys else None
        records = list(read_records(path))[part]
        samples = [self._to_sample(where, record) for where, record in records]
        self.samples = [s for s in samples if not self._too_long(s)]
        self.dropped_too_long = len(samples) - len(self.samples)
        if self.dropped_too_long:
            first = next(s for s in samples if self._too_long(s)).metadata["source"]
            logger.warning(
                "%s: dropped %d of %d prompts longer than %d tokens (%s), the first at %s",
                path,
                self.dropped_too_long,
                len(samples),
                fmt.max_prompt_len,
                fmt.max_prompt_len_flag,
                first,
            )
        if not self.samples:
            why = (
                f"all {len(samples)} are longer than {fmt.max_prompt_len} tokens ({fmt.max_prompt_len_flag}); raise it"
                if samples
                else "the file (or its slice) holds no record"
            )
            raise DataError(f"{spec}: no prompts left: {why}")

    def __len__(self) -> int:
        return len(self.samples)

    def _to_sample(self, where: str, record: dict[str, Any]) -> Sample:
        fmt = self.format
        check_record(where, record, fmt)
        prompt = record[fmt.input_key]
        metadata = dict(record.get(fmt.metadata_key) or {}) if fmt.metadata_key else {}
        tools = record.get(fmt.tool_key) if fmt.tool_key else None
        if tools is not None:
            metadata["tools"] = tools
        metadata["source"] = where
        sample = Sample(prompt=prompt, label=record.get(fmt.label_key) if fmt.label_key else None, metadata=metadata)
        if self.processor is not None:
            return self._with_images(sample, record, where)
        if fmt.apply_chat_template:
            sample.prompt = self._render(prompt, tools, where)
        if self.tokenizer is not None and isinstance(sample.prompt, str):
            sample.tokens = list(self.tokenizer.encode(sample.prompt, add_special_tokens=False))
        return sample

    def _with_images(self, sample: Sample, record: dict[str, Any], where: str) -> Sample:
        """``sample`` with its images and videos (``multimodal_inputs``, slime's field), its prompt
        rendered by the chat template and its tokens from the processor (vision tokens expanded)."""
        from slime_core.multimodal.images import ImageError
        from slime_core.multimodal.prompts import encode_prompt

        messages, media = record_images(where, record, self.format)
        try:
            sample.prompt, sample.tokens = encode_prompt(
                self.processor, messages, media, self.format.chat_template_kwargs
            )
        except ImageError as exc:  # a video the model's video processor cannot take
            raise DataError(f"{where}: {exc}") from None
        except Exception as exc:
            raise DataError(f"{where}: the processor failed on this prompt ({type(exc).__name__}: {exc})") from exc
        sample.multimodal_inputs = media.multimodal_inputs()
        return sample

    def _render(self, prompt: str | list, tools: Any, where: str) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True, **self.format.chat_template_kwargs
            )
        except Exception as exc:
            raise DataError(f"{where}: the chat template failed on this prompt ({type(exc).__name__}: {exc})") from exc

    def _too_long(self, sample: Sample) -> bool:
        limit = self.format.max_prompt_len
        return limit is not None and len(sample.tokens) > limit


def _processor(tokenizer, keys: dict[str, str]):
    """The processor of the model whose ``tokenizer`` this is (``--multimodal-keys``); with a
    ``video`` key it must process videos."""
    from slime_core.multimodal.processor import load_processor

    processor = load_processor(tokenizer.name_or_path)
    if processor is None:
        raise DataError(
            f"--multimodal-keys: the model at {tokenizer.name_or_path} has no processor (no processor_config.json); "
            "give a vision-language model's directory as --hf-checkpoint, or drop --multimodal-keys"
        )
    if "video" in keys and getattr(processor, "video_processor", None) is None:
        raise DataError(
            f"--multimodal-keys names videos, and the processor of {tokenizer.name_or_path} "
            f"({type(processor).__name__}) takes none here (videos are processed for the Qwen2-VL, Qwen2.5-VL and "
            "Qwen3-VL families, or with torchvision installed); drop video from --multimodal-keys"
        )
    return processor
