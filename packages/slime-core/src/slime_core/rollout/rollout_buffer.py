"""The ``rollout_buffer`` rollout function: train on the trajectories an external rollout buffer
serves (``--rollout-buffer-url``), speaking the HTTP API of slime's ``slime_plugins/rollout_buffer``.

The buffer runs its own generators (agents, environments) against the run's engines and
collects their finished trajectories. Per run and rollout:

1. before the first rollout: ``POST {url}/start_rollout`` with the task (slime's payload:
   ``task_type`` from ``--rollout-task-type``, ``input_file`` from ``--prompt-data``,
   ``remote_engine_url`` the router's address, ``remote_buffer_url``, ``num_repeat_per_sample``,
   ``max_tokens``, ``sampling_params``, ``tokenizer_path``, ``num_epoch``, ``num_process``,
   ``skip_instance_ids``);
2. ``POST {url}/get_rollout_data`` (body ``{}``) until ``--rollout-batch-size`` ×
   ``--n-samples-per-prompt`` trajectories came. The answer is ``{"success": bool, "message": str,
   "data": {"data": [item, ...], "meta_info": {...}}}``; ``success`` false means nothing is
   ready yet (asked again a second later). Each item holds ``uid``, ``instance_id`` (its group),
   ``messages`` (the OpenAI chat conversation), ``reward`` and ``extra_info`` (a ``finish_reason``
   of ``"length"`` marks it truncated; ``timestamp``). A failed request is retried
   ``--fetch-trajectory-retry-times`` times (-1: without end);
3. the items are grouped by ``instance_id`` and, as slime does, the ``--rollout-batch-size``
   newest groups (by their latest timestamp) are trained on; each conversation is tokenized with
   the chat template, its assistant turns trained on (`slime_core.data.chat_mask`). The buffer's
   ``meta_info`` (``total_samples``, ``avg_reward``: before its own filtering) is logged as
   ``rollout/no_filter/...``.

Trajectories carry no engine log-probs (their ``rollout_log_probs`` are zeros), so options that
train on them (``--use-tis``, ``--use-rollout-logprobs``) are refused with the buffer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiohttp

from slime_core.data.chat_mask import conversation_tokens_and_mask, response_length
from slime_core.faults.run_error import RunError
from slime_core.rollout.parts import RolloutParts
from slime_core.rollout.result import RolloutResult
from slime_core.sample import Sample, SampleStatus

if TYPE_CHECKING:
    from slime_core.config.config import Config

#: keys every trajectory the buffer serves holds (slime's check)
REQUIRED_KEYS = ("uid", "instance_id", "messages", "reward", "extra_info")
#: seconds between two asks while the buffer has nothing ready
POLL_SECONDS = 1.0
#: the buffers told to start in this process (slime tells each once per process, as here)
_started: set[str] = set()


async def rollout_buffer_rollout(rollout_id: int, config: Config, parts: RolloutParts) -> RolloutResult:
    """One rollout from the buffer (see the module docstring)."""
    url = config.rollout_buffer_url.rstrip("/")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        if url not in _started:
            await _post(session, f"{url}/start_rollout", start_payload(config, parts))
            _started.add(url)
        items, meta = await _fetch(session, url, config.rollout_batch_size * config.n_samples_per_prompt, config)
    groups = newest_groups(items, config.rollout_batch_size)
    tokenizer = parts.ctx.tokenizer
    samples = [[to_sample(item, g, i, tokenizer) for i, item in enumerate(group)] for g, group in enumerate(groups)]
    return RolloutResult(samples, _meta_metrics(meta))


def start_payload(config: Config, parts: RolloutParts) -> dict[str, Any]:
    """What ``/start_rollout`` is told (slime's keys; numbers as strings where slime sends them so)."""
    engine_url = getattr(parts.ctx.engine, "url", None)
    return {
        "num_process": str(config.rollout_concurrency),
        "num_epoch": str(config.get("num_epoch") or 3),
        "remote_engine_url": engine_url,
        "remote_buffer_url": config.rollout_buffer_url,
        "task_type": config.rollout_task_type,
        "input_file": config.prompt_data,
        "num_repeat_per_sample": str(config.n_samples_per_prompt),
        "max_tokens": str(config.rollout_max_response_len),
        "sampling_params": {
            "max_tokens": config.rollout_max_response_len,
            "temperature": config.rollout_temperature,
            "top_p": config.rollout_top_p,
        },
        "tokenizer_path": config.hf_checkpoint,
        "skip_instance_ids": [],
    }


async def _fetch(session, url: str, wanted: int, config: Config) -> tuple[list[dict], list[dict]]:
    """At least ``wanted`` trajectories and the ``meta_info`` of each answer that brought some."""
    items: list[dict] = []
    metas: list[dict] = []
    failures, allowed = 0, config.get("fetch_trajectory_retry_times")
    while len(items) < wanted:
        try:
            answer = await _post(session, f"{url}/get_rollout_data", {})
        except RunError:
            failures += 1
            if allowed is not None and allowed != -1 and failures > allowed:
                raise
            await asyncio.sleep(POLL_SECONDS)
            continue
        if not answer.get("success"):
            await asyncio.sleep(POLL_SECONDS)
            continue
        data = answer.get("data") or {}
        new = data.get("data", []) if isinstance(data, dict) else data
        items += [_checked(item, url) for item in new]
        if isinstance(data, dict) and data.get("meta_info"):
            metas.append(data["meta_info"])
    return items, metas


async def _post(session, url: str, body: dict) -> dict:
    try:
        async with session.post(url, json=body) as response:
            if response.status >= 400:
                text = (await response.text())[:300]
                raise RunError(f"the rollout buffer answered {response.status} to POST {url}: {text}")
            return await response.json()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise RunError(
            f"the rollout buffer at {url} did not answer ({type(exc).__name__}: {exc}); is it running at "
            "--rollout-buffer-url?"
        ) from exc


def _checked(item: Any, url: str) -> dict:
    missing = [key for key in REQUIRED_KEYS if not isinstance(item, dict) or key not in item]
    if missing:
        raise RunError(
            f"the rollout buffer at {url} served a trajectory without {', '.join(missing)}: {str(item)[:200]}; "
            f"each needs {', '.join(REQUIRED_KEYS)}"
        )
    return item


def newest_groups(items: list[dict], count: int) -> list[list[dict]]:
    """The ``count`` groups (items of one ``instance_id``) with the latest timestamps, newest first."""
    groups: dict[Any, list[dict]] = {}
    for item in items:
        groups.setdefault(item["instance_id"], []).append(item)
    return sorted(groups.values(), key=_latest, reverse=True)[:count]


def _latest(group: list[dict]) -> float:
    stamps = [item.get("timestamp", (item.get("extra_info") or {}).get("timestamp")) for item in group]
    return max((float(stamp) for stamp in stamps if stamp is not None), default=0.0)


def to_sample(item: dict, group_index: int, index: int, tokenizer) -> Sample:
    """A trained sample of one trajectory: the conversation's tokens, its response from the first
    trained token on, the buffer's reward."""
    tokens, mask = conversation_tokens_and_mask(tokenizer, item["messages"])
    length = response_length(mask)
    extra = dict(item["extra_info"] or {})
    truncated = extra.get("finish_reason") == "length"
    return Sample(
        group_index=group_index,
        index=index,
        prompt=item["messages"],
        tokens=tokens,
        response=tokenizer.decode(tokens[len(tokens) - length :]),
        response_length=length,
        reward=item["reward"],
        loss_mask=mask[len(mask) - length :],
        rollout_log_probs=[0.0] * length,
        status=SampleStatus.TRUNCATED if truncated else SampleStatus.COMPLETED,
        metadata={**extra, "uid": item["uid"], "instance_id": item["instance_id"]},
    )


def _meta_metrics(metas: list[dict]) -> dict[str, float]:
    """slime's ``rollout/no_filter/*``: the buffer's own counts, before it filtered groups."""
    counted = [m for m in metas if "total_samples" in m]
    total = sum(m["total_samples"] for m in counted)
    if not total:
        return {}
    reward = sum(m.get("avg_reward", 0.0) * m["total_samples"] for m in counted) / total
    return {"rollout/no_filter/total_samples": float(total), "rollout/no_filter/avg_reward": float(reward)}
