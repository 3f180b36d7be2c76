"""The CPU engine as the HTTP layer sees it: the loaded model, its scheduler, and the
asyncio side of submitting requests and calls to the scheduler thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from slime_sglang.cpu_engine.request import BadRequest, GenerateRequest, answer
from slime_sglang.cpu_engine.routing import engine_routing, refuse_without_routing
from slime_sglang.cpu_engine.scheduler import Scheduler
from slime_sglang.cpu_engine.stopping import StopChecker, eos_token_ids
from slime_sglang.cpu_engine.top_logprobs import top_logprobs
from slime_sglang.cpu_engine.vision import ImageInputs, is_vision_language, prefill_inputs
from slime_sglang.cpu_engine.weights import load_model


@dataclass
class Engine:
    model_path: str
    model: object  # a transformers causal LM
    tokenizer: object  # its tokenizer, for prompts sent as text
    scheduler: Scheduler
    context_length: int  # prompt + output tokens of one request, at most
    vocab_size: int  # valid token ids are 0 .. vocab_size - 1
    released: set[str] = field(default_factory=set)  # memory tags released and not resumed
    released_weights: Path | None = None  # where released weights wait for resume
    in_flight: set[str] = field(default_factory=set)  # rids of the requests being generated
    lora_base: dict = field(default_factory=dict)  # adapted weight name -> its base (`adapters.merge`)
    weight_groups: dict = field(default_factory=dict)  # name -> weight_groups.WeightGroup (None while joining)
    batch_invariant: bool = False  # --enable-deterministic-inference: log-probs of each sequence alone
    image_inputs: ImageInputs | None = None  # a vision-language model's image_data reader (None: text only)

    def with_images(self, image_data, copies: list[GenerateRequest], video_data=None) -> list[GenerateRequest]:
        """``copies`` (one prompt's requests) holding that prompt's images and videos; `BadRequest`
        for image_data or video_data sent to a text-only model."""
        if image_data is None and video_data is None and self.image_inputs is None:
            return copies
        if self.image_inputs is None:
            field = "image_data" if image_data is not None else "video_data"
            raise BadRequest(f"{field}: {self.model_path} is a text-only model, which takes no images or videos")
        images = self.image_inputs.parse(image_data, copies[0].input_ids, video_data)
        for copy in copies:
            copy.images = images
        return copies

    async def generate(self, request: GenerateRequest) -> dict:
        """Answer one request; if the caller goes away (cancellation), its generation is aborted."""
        if request.rid in self.in_flight:
            raise BadRequest(f"rid {request.rid!r} is already in flight; give each request a unique rid")
        refuse_without_routing(self.scheduler.routing, request)
        result = await self._generated(request)
        if self.batch_invariant and request.return_logprob:
            from slime_sglang.cpu_engine.batch_invariant import report_alone

            await self.at_safe_point(lambda: report_alone(self.model, request, result))
        if request.return_logprob and request.logprob_start_len >= 0:
            result["meta_info"]["input_token_logprobs"] = await self.at_safe_point(
                lambda: self.prompt_logprobs(request)
            )
        if request.return_logprob and request.top_logprobs_num > 0:
            ids = request.input_ids + request.output_ids
            top = await self.at_safe_point(
                lambda: top_logprobs(self.model, self.tokenizer, request, **self.image_forward_inputs(ids, request))
            )
            result["meta_info"].update(top)
        return result

    def tokenize(self, text: str) -> list[int]:
        """A prompt sent as text, tokenised as SGLang's tokenizer manager does (special tokens added)."""
        return self.tokenizer.encode(text)

    def prompt_logprobs(self, request: GenerateRequest) -> list[list]:
        """SGLang's ``input_token_logprobs`` of ``request``: ``[logprob, id, text]`` for each prompt
        token from ``logprob_start_len``, the log-prob of the token after the ones before it (under
        the current weights, no temperature), null for the first token. Run on the scheduler thread."""
        ids = request.input_ids
        with torch.no_grad():
            logits = self.model(torch.tensor([ids]), **self.image_forward_inputs(ids, request)).logits[0, :-1].float()
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        values = [None, *chosen.tolist()]
        texts = (
            self.tokenizer.batch_decode([[t] for t in ids]) if request.return_text_in_logprobs else [None] * len(ids)
        )
        start = request.logprob_start_len
        return [list(entry) for entry in zip(values[start:], ids[start:], texts[start:])]

    def image_forward_inputs(self, ids: list[int], request: GenerateRequest) -> dict:
        """The extra inputs of a one-row forward over ``ids`` (the request's prompt, with or without
        its output) of a vision-language model: the prompt's images and the three-row positions; none
        for a text model."""
        if self.image_inputs is None:
            return {}
        inputs, _ = prefill_inputs(self.model, torch.tensor([ids]), torch.ones(1, len(ids)), [request.images])
        return inputs

    async def _generated(self, request: GenerateRequest) -> dict:
        if request.params.max_new_tokens == 0:
            request.finish_reason = {"type": "length", "length": 0}
            return answer(request, "", self.scheduler.weight_version)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request.on_done = lambda result: loop.call_soon_threadsafe(_settle, future, result)
        self.in_flight.add(request.rid)
        self.scheduler.submit(request)
        try:
            result = await future
        except asyncio.CancelledError:
            self.scheduler.call(lambda: self.scheduler.abort(request.rid, "the client disconnected"))
            raise
        finally:
            self.in_flight.discard(request.rid)
        if isinstance(result, Exception):
            raise result
        return result

    async def at_safe_point(self, fn: Callable[[], object]):
        """``fn()``'s result, run on the scheduler thread between two generation steps."""
        return await asyncio.wrap_future(self.scheduler.call(fn))

    def server_info(self) -> dict:
        scheduler = self.scheduler
        return {
            "model_path": self.model_path,
            "weight_version": scheduler.weight_version,
            "max_running_requests": scheduler.max_running_requests,
            "running_requests": scheduler.running_requests,
            "waiting_requests": scheduler.waiting_requests,
            "paused": scheduler.paused,
            "released_memory": sorted(self.released),
            "weight_update_groups": sorted(name for name, group in self.weight_groups.items() if group is not None),
            "context_length": self.context_length,
            "finished_requests": scheduler.finished_requests,
            "generated_tokens": scheduler.generated_tokens,
            "engine": "slime-cpu-engine",
        }


def load_engine(
    model_path: str, max_running_requests: int, context_length: int | None = None, batch_invariant: bool = False
) -> Engine:
    """Load the model in ``model_path`` and start its scheduler thread (``batch_invariant``: see `Engine`)."""
    model, tokenizer = load_model(model_path)
    if batch_invariant and is_vision_language(model.config):
        raise ValueError(
            f"--enable-deterministic-inference: {model_path} is a vision-language model, whose images the "
            "per-sequence recompute does not take; serve it without that option"
        )
    stop_checker = StopChecker(tokenizer, eos_token_ids(model, tokenizer))
    scheduler = Scheduler(model, stop_checker, max_running_requests, routing=engine_routing(model))
    scheduler.start()
    return Engine(
        model_path=model_path,
        model=model,
        tokenizer=tokenizer,
        scheduler=scheduler,
        context_length=context_length or model.config.get_text_config().max_position_embeddings,
        vocab_size=model.get_input_embeddings().num_embeddings,
        batch_invariant=batch_invariant,
        image_inputs=ImageInputs(model_path, model.config) if is_vision_language(model.config) else None,
    )


def _settle(future: asyncio.Future, result) -> None:
    if not future.done():  # a cancelled caller no longer waits
        future.set_result(result)
