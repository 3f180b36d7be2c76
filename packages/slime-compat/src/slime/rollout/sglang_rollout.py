"""slime.rollout.sglang_rollout: the building blocks slime's generate and rollout functions
call — `GenerateState`, `generate`, `generate_and_rm`, `generate_and_rm_group` — on SGLang's
``/generate`` at ``args.sglang_router_ip/port`` and our reward functions.

slime's default rollout, ``generate_rollout`` / ``eval_rollout``, called from a rollout or
eval function, runs ours (`slime_compat.default_rollout`); naming it on the command line
selects ours directly (`slime_compat.hooks.NATIVE_EQUIVALENTS`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from slime.utils.processing_utils import load_processor
from slime_compat.args import config_of
from slime_compat.default_rollout import eval_rollout, generate_rollout
from slime_compat.functions import accepts, load_function
from slime_compat.generate import SLIME_TEXT_OPTIONS
from slime_compat.http import post
from slime_compat.rewards import async_rm, batched_async_rm
from slime_compat.sample import Sample, promote
from slime_core.engine import append_result, parse_generate
from slime_core.multimodal.images import image_data
from slime_core.multimodal.videos import video_data

__all__ = ["GenerateState", "eval_rollout", "generate", "generate_and_rm", "generate_and_rm_group", "generate_rollout"]

_DONE = (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)


class GenerateState:
    """What generation shares within a run (one per run config, like slime's singleton):
    the tokenizer, the default sampling params, and a bound on concurrent requests."""

    _states: dict[int, GenerateState] = {}

    def __new__(cls, args):
        key = id(config_of(args))
        if key not in cls._states:
            cls._states[key] = state = super().__new__(cls)
            state._setup(args)
        return cls._states[key]

    def _setup(self, args) -> None:
        from transformers import AutoTokenizer

        self.args = args
        self.tokenizer = AutoTokenizer.from_pretrained(args.hf_checkpoint, trust_remote_code=True)
        self.processor = load_processor(args.hf_checkpoint)  # a vision-language model's, else None
        self.semaphore = asyncio.Semaphore(getattr(args, "rollout_concurrency", None) or 256)
        self.sampling_params: dict[str, Any] = dict(
            temperature=args.rollout_temperature,
            top_p=args.rollout_top_p,
            top_k=args.rollout_top_k,
            max_new_tokens=args.rollout_max_response_len,
            stop=args.rollout_stop,
            stop_token_ids=args.rollout_stop_token_ids,
            **SLIME_TEXT_OPTIONS,
        )
        self.reset()

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings: set = set()
        self.aborted = False

    def prompt_ids(self, sample: Sample) -> list[int]:
        """The prompt's token ids (chat messages through the chat template)."""
        if isinstance(sample.prompt, list):
            return list(self.tokenizer.apply_chat_template(sample.prompt, tokenize=True, add_generation_prompt=True))
        return self.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]


async def generate(args, sample: Sample, sampling_params: dict[str, Any]) -> Sample:
    """One ``/generate`` call continuing the sample; appends the model's tokens and sets the status."""
    sample = promote(sample)
    if not sample.tokens:
        sample.tokens = GenerateState(args).prompt_ids(sample)
    params = {**sampling_params, "max_new_tokens": sampling_params["max_new_tokens"] - sample.response_length}
    if params["max_new_tokens"] <= 0:
        sample.status = Sample.Status.TRUNCATED
        return sample
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    body = {"input_ids": sample.tokens, "sampling_params": params, "return_logprob": True}
    body.update(**image_data(sample), **video_data(sample))
    if getattr(args, "use_rollout_routing_replay", False):
        body["return_routed_experts"] = True
    answer = await post(url, body)
    append_result(sample, parse_generate(answer))
    return sample


async def generate_and_rm(args, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False):
    """Generate (the sample's or the flag's custom generate function, else `generate`), then
    score what has no reward yet (not with ``--group-rm``: `generate_and_rm_group` does)."""
    sample = promote(sample)
    if sample.status in _DONE:
        return sample
    async with GenerateState(args).semaphore:
        path = sample.generate_function_path or args.custom_generate_function_path
        if path:
            fn = load_function(path)
            extra = {"evaluation": evaluation} if accepts(fn, "evaluation") else {}
            sample = await fn(args, sample, sampling_params, **extra)
        else:
            sample = await generate(args, sample, sampling_params)
    if not args.group_rm:
        for one in sample if isinstance(sample, list) else [sample]:
            if one.status is not Sample.Status.ABORTED and one.reward is None:
                one.reward = await async_rm(args, one)
    return sample


async def generate_and_rm_group(args, group: list[Sample], sampling_params: dict[str, Any], evaluation: bool = False):
    """`generate_and_rm` for every sample of a group; with ``--group-rm``, one reward call for the group."""
    group = list(
        await asyncio.gather(*(generate_and_rm(args, sample, dict(sampling_params), evaluation) for sample in group))
    )
    if args.group_rm and not any(sample.status is Sample.Status.ABORTED for sample in group):
        for sample, reward in zip(group, await batched_async_rm(args, group)):
            sample.reward = reward
    return group
