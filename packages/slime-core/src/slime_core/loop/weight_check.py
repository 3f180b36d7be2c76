"""``--check-weight-update-equal``: after an update, every engine and the trainer must give
the same log-probs to the same tokens.

Each engine samples a short response to a fixed probe prompt (at the rollout temperature,
returning the log-prob of every sampled token); the trainer scores those exact tokens. On
the same weights the two agree to float tolerance; a wrong name, shape or transpose in the
weight export shows up as a large difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config import Config

PROBE_TEXT = "1+2="
PROBE_TOKENS = 8


def max_logprob_diff(parts, config: Config, version: int) -> float:
    """The largest |engine − trainer| log-prob over every engine's probe; raises when it is
    beyond tolerance (1e-3 in float32, 5e-2 in bf16). ``parts``: the run's
    `slime_core.loop.parts.Parts` (its rollout backend, engines, rollout manager and trainer)."""
    from slime_core.rollout_batch import RolloutBatch

    prompt = list(parts.rollouts.tokenizer.encode(PROBE_TEXT, add_special_tokens=False))
    probes = parts.rollouts.run(_probe_engines(parts.backend, parts.engines.urls, prompt, config))
    results = probes * -(-parts.trainer.num_ranks // len(probes))  # a probe group for every train rank
    batch = RolloutBatch(
        tokens=[prompt + r.output_ids for r in results],
        response_lengths=[len(r.output_ids) for r in results],
        loss_masks=[[1] * len(r.output_ids) for r in results],
        rewards=[0.0] * len(results),
        group_ids=list(range(len(results))),
        rollout_log_probs=[list(r.log_probs) for r in results],
    )
    trainer = parts.trainer.compute_log_probs(batch)
    diff = max(abs(a - b) for engine, ours in zip(batch.rollout_log_probs, trainer) for a, b in zip(engine, ours))
    tolerance = 5e-2 if config.bf16 else 1e-3
    if diff > tolerance:
        raise RuntimeError(
            f"--check-weight-update-equal: after the update to version {version} an engine's log-probs differ "
            f"from the trainer's by {diff:.4g} (> {tolerance}); the weights did not arrive intact: check the "
            "train backend's weight export names/shapes and --update-weight-transport"
        )
    return diff


async def _probe_engines(backend, urls: list[str], prompt: list[int], config: Config) -> list:
    """Each engine's sampled probe, through the rollout backend's client for that engine."""
    from slime_core.engine import SamplingParams

    sampling = SamplingParams(max_new_tokens=PROBE_TOKENS, temperature=config.rollout_temperature, sampling_seed=0)
    results = []
    for url in urls:
        client = backend.client(url, api_key=config.network.token)  # across nodes /generate wants it
        try:
            results.append(await client.generate(prompt, sampling, return_logprob=True))
        finally:
            await client.close()
    return results
