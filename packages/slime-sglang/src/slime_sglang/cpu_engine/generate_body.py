"""A whole ``/generate`` body as SGLang's ``GenerateReqInput`` takes it, split into one body per
prompt for `request.parse_generate_copies`.

SGLang accepts the prompt as ``text`` (tokenised by the server with the model's tokenizer) or
as ``input_ids``, one prompt or a batch (a list of texts, a list of id lists); in a batch,
``sampling_params``, ``rid``, ``return_logprob``, ``logprob_start_len``, ``top_logprobs_num``
and ``return_text_in_logprobs`` may each be one value for all prompts or a list with one per
prompt, and the answer is a list (prompt-major when ``sampling_params.n`` > 1). Every field of
``GenerateReqInput`` is accepted: the ones that only steer SGLang's logging, routing or caching
are ignored, and the ones asking for what the CPU engine cannot do are refused when set,
naming the field.
"""

from __future__ import annotations

from collections.abc import Callable

from slime_sglang.cpu_engine.request import BadRequest, refuse_unknown

#: the fields of SGLang's GenerateReqInput (sglang 0.5.23, io_struct.py, with its BaseReq's)
GENERATE_REQ_FIELDS = (
    "audio_data", "background", "bootstrap_host", "bootstrap_pair_key", "bootstrap_port", "bootstrap_room",
    "cache_salt", "conversation_id", "custom_labels", "custom_logit_processor", "data_parallel_rank",
    "decode_tp_size", "disagg_prefill_dp_rank", "encoder_urls", "external_trace_header", "extra_key",
    "http_worker_ipc", "image_data", "image_max_dynamic_patch", "images_config", "input_embeds", "input_ids",
    "kv_hints", "log_metrics", "logprob_start_len", "lora_id", "lora_path", "max_dynamic_patch",
    "max_thinking_tokens", "min_dynamic_patch", "mm_content_hashes", "mm_hashes", "mm_processor_kwargs",
    "modalities", "multi_item_delimiter_indices", "need_wait_for_mm_inputs", "no_logs", "num_items_assigned",
    "positional_embed_overrides", "priority", "received_time", "require_reasoning", "return_bytes",
    "return_entropy", "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs",
    "return_flat_raw_top_logprobs_b64", "return_hidden_states", "return_indexer_topk", "return_logprob",
    "return_prompt_token_ids", "return_routed_experts", "return_sampling_mask", "return_text_in_logprobs", "rid",
    "routed_dp_rank", "routed_experts_start_len", "routing_key", "sampling_logprobs_mode", "sampling_params",
    "session_id", "session_params", "stream", "text", "token_ids_logprob", "token_indices_to_pool",
    "top_logprobs_num", "use_audio_in_video", "video_config", "video_data", "video_max_dynamic_patch", "watermark",
)  # fmt: skip
#: fields given per prompt in a batch (one value for all, or a list of one per prompt)
PER_PROMPT = (
    "sampling_params", "rid", "return_logprob", "logprob_start_len", "return_text_in_logprobs", "top_logprobs_num",
    "return_routed_experts",
)  # fmt: skip
#: fields that steer SGLang's logging, scheduling, routing or prefix cache, not the answer of one engine;
#: sglang-router adds ``model``, which is not a GenerateReqInput field
IGNORED = (
    "model", "log_metrics", "no_logs", "priority", "custom_labels", "routing_key", "extra_key", "cache_salt",
    "data_parallel_rank", "routed_dp_rank", "disagg_prefill_dp_rank", "conversation_id", "received_time",
    "http_worker_ipc", "external_trace_header", "num_items_assigned", "kv_hints",
)  # fmt: skip
#: fields the CPU engine handles (the rest of GenerateReqInput must be left out, null, false or empty)
HANDLED = ("text", "input_ids", "stream", "image_data", "video_data", *PER_PROMPT)
#: why a field the CPU engine cannot honour is refused, where more can be said than "not supported"
REFUSALS = {
    "audio_data": "the CPU engine serves text-only models, which take no audio",
    "input_embeds": "the CPU engine takes the prompt as text or input_ids, not as embeddings",
    "lora_path": "the CPU engine serves no LoRA adapters",
    "lora_id": "the CPU engine serves no LoRA adapters",
    "custom_logit_processor": "the CPU engine runs no custom logit processors",
    "session_params": "the CPU engine keeps no sessions",
}


def split_generate_body(body, tokenize: Callable[[str], list[int]]) -> tuple[list[dict], bool]:
    """The per-prompt bodies of ``body`` (each with ``input_ids``, and the per-prompt fields
    that were given), and whether it was a batch (answered with a list); ``BadRequest`` naming
    the field for anything the CPU engine cannot do. ``tokenize`` turns a text into ids as
    SGLang's tokenizer manager does."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with text or input_ids, and sampling_params")
    refuse_unknown(body, GENERATE_REQ_FIELDS + ("model",), "request field")
    refuse_unsupported(body)
    prompts, batched = _prompts(body, tokenize)
    items = [{"input_ids": ids} for ids in prompts]
    for key in PER_PROMPT:
        if key not in body:
            continue
        values = body[key]
        if batched and isinstance(values, list):
            if len(values) != len(items):
                raise BadRequest(f"{key} has {len(values)} entries for a batch of {len(items)} prompts")
        elif key == "rid" and batched and values is not None:
            raise BadRequest("rid must be a list of one id per prompt in a batch (or left out)")
        else:
            values = [values] * len(items)
        for item, value in zip(items, values):
            item[key] = value
    for key, kind in (("image_data", "image(s)"), ("video_data", "videos")):
        for item, media in zip(items, _per_prompt(body.get(key), len(items), batched, key, kind)):
            item[key] = media
    return items, batched


def _per_prompt(data, count: int, batched: bool, key: str, kind: str) -> list:
    """Each prompt's ``image_data`` (an image, a list of images, or None) or ``video_data`` (a
    list of videos, each a list of frames, or None): the value itself for one prompt; for a
    batch, a list with one entry per prompt."""
    if not batched or data is None:
        return [data] * (1 if not batched else count)
    if not isinstance(data, list) or len(data) != count:
        raise BadRequest(f"{key} of a batch of {count} prompts must be a list of one entry ({kind} or null) each")
    return data


def refuse_unsupported(body: dict) -> None:
    """``BadRequest`` for a set field the CPU engine cannot honour (null, false, 0 and empty are unset)."""
    asked = [key for key in body if key not in HANDLED + IGNORED and body[key] not in (None, False, 0, "", [], {})]
    if asked:
        reasons = [f"{key}: {REFUSALS.get(key, 'not supported by the CPU engine')}" for key in asked]
        raise BadRequest(f"the CPU engine cannot honour {'; '.join(reasons)}; leave these fields out (or null)")


def _prompts(body: dict, tokenize: Callable[[str], list[int]]) -> tuple[list[list[int]], bool]:
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is not None and input_ids is not None:
        raise BadRequest("give the prompt as text or as input_ids, not both")
    if text is not None:
        if isinstance(text, str):
            return [tokenize(text)], False
        if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            return [tokenize(t) for t in text], True
        raise BadRequest("text must be a string (one prompt) or a non-empty list of strings (a batch)")
    if input_ids is None:
        raise BadRequest("input_ids is missing: send the prompt as text, or as a list of token ids")
    if isinstance(input_ids, list) and input_ids and all(isinstance(ids, list) for ids in input_ids):
        return input_ids, True
    return [input_ids], False  # checked by parse_generate
