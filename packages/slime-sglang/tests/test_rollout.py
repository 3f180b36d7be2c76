"""The default rollout function against a real CPU engine over HTTP."""

import asyncio
import json

import pytest

from slime_core.data.source import PromptDataSource
from slime_core.plugins import Plugins
from slime_core.rollout.default import default_rollout
from slime_core.rollout.evaluation import evaluate, pass_at_k
from slime_core.rollout.generate import generate_sample
from slime_core.rollout.parts import GenerateContext, RolloutParts
from slime_core.rollout.reward_hub import RewardHub
from slime_core.sample import SampleStatus
from slime_core.testing import make_config
from slime_sglang.client import EngineClient
from slime_sglang.engine_group import EngineGroup

pytestmark = pytest.mark.integration


def length_reward(sample, config):
    """A reward with some spread inside a group: the response's length parity."""
    return float(sample.response_length % 2)


def keep_even_groups(group, config, progress):
    """Rejects every group with an odd index: half of all groups are filtered out."""
    return group[0].group_index % 2 == 0


@pytest.fixture
def parts_for(tmp_path, tiny_model_dir, tokenizer, engine_url):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "label": str(2 * a)}) + "\n" for a in range(40)))

    def build(**overrides):
        plugins = Plugins()
        plugins.register_object("test_rewards", _RewardPlugin)
        config = make_config(
            data,
            tiny_model_dir,
            **{
                "rollout_batch_size": 4,
                "n_samples_per_prompt": 3,
                "rollout_max_response_len": 12,
                "rm_type": "length_parity",
                **overrides,
            },
        )
        client = EngineClient(engine_url)
        parts = RolloutParts(
            data_source=PromptDataSource.from_config(config, tokenizer),
            reward_hub=RewardHub(config, plugins),
            generate=generate_sample,
            group_filter=keep_even_groups,
            ctx=GenerateContext(client, tokenizer, config),
            engines=EngineGroup([engine_url]),
        )
        return config, parts

    return build


class _RewardPlugin:
    from slime_core import hookimpl

    @staticmethod
    @hookimpl
    def slime_register_reward_functions(register):
        register("length_parity", length_reward)


def test_over_sampling_with_a_filter_returns_exactly_the_batch(parts_for):
    config, parts = parts_for(over_sampling_batch_size=6)
    result = asyncio.run(default_rollout(0, config, parts))
    assert len(result.groups) == 4
    assert all(group[0].group_index % 2 == 0 and len(group) == 3 for group in result.groups)
    m = result.metrics
    assert m["rollout/groups_filtered"] > 0  # odd groups were generated, scored and rejected
    accounted = ("filtered", "aborted", "surplus", "failed_reward")
    assert m["rollout/groups_submitted"] == 4 + sum(m[f"rollout/groups_{what}"] for what in accounted)
    for sample in (s for group in result.groups for s in group):
        assert sample.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
        assert len(sample.rollout_log_probs) == sample.response_length > 0
        assert sample.weight_versions and sample.reward in (0.0, 1.0)
        assert sample.metadata["generate_seconds"] > 0


class _CountingClient(EngineClient):
    """The real client, counting the /generate requests it sends."""

    generate_requests = 0

    async def _call(self, method, path, body=None):
        self.generate_requests += path == "/generate"
        return await super()._call(method, path, body)


def test_a_fresh_group_is_one_request_and_samples_what_per_sample_requests_sample(parts_for, engine_url):
    """--rollout-group-requests (the default) sends each fresh group as one request for its n
    samples, unless the group is larger than --rollout-concurrency allows in flight; the
    samples (tokens, log-probs) are those of one request per sample."""
    samples, requests = {}, {}
    for grouped, concurrency in ((True, 512), (False, 512), (True, 2)):
        config, parts = parts_for(
            rollout_group_requests=grouped,
            rollout_concurrency=concurrency,
            rollout_max_response_len=6,
        )
        parts.group_filter = None
        parts.ctx.engine = _CountingClient(engine_url)
        parts.ctx.per_copy_seeds = True  # the CPU engine seeds each copy of a group request
        result = asyncio.run(default_rollout(0, config, parts))
        samples[grouped, concurrency] = {(s.group_index, s.index): s for group in result.groups for s in group}
        requests[grouped, concurrency] = parts.ctx.engine.generate_requests
        assert result.metrics["rollout/groups_submitted"] == 4
    assert requests == {(True, 512): 4, (False, 512): 12, (True, 2): 12}  # 4 groups of 3
    grouped, alone = samples[True, 512], samples[False, 512]
    assert grouped.keys() == alone.keys() == samples[True, 2].keys() and len(grouped) == 12
    assert len({tuple(s.tokens) for s in grouped.values()}) > 4  # samples of a group differ
    for key, sample in grouped.items():
        assert sample.tokens == alone[key].tokens == samples[True, 2][key].tokens and sample.status == alone[key].status
        assert sample.rollout_log_probs == pytest.approx(alone[key].rollout_log_probs, abs=1e-4)
        assert sample.metadata["generate_seconds"] > 0


def test_partial_groups_come_back_from_the_buffer_and_finish(parts_for):
    # Stop strings end responses after a random number of tokens (a random model emits each
    # character now and then), so groups finish at very different times and the abort that
    # ends the rollout catches some mid-generation.
    config, parts = parts_for(
        partial_rollout=True,
        rollout_batch_size=2,
        over_sampling_batch_size=8,
        rollout_max_response_len=400,
        rollout_stop=["a", "e", "i"],
    )

    async def two_rollouts():
        first = await default_rollout(0, config, parts)
        handed_back = [[s for s in group] for group in parts.data_source.buffer.groups]
        snapshot = {(s.group_index, s.index): (s.status, s.response_length) for g in handed_back for s in g}
        return first, handed_back, snapshot, await default_rollout(1, config, parts)

    first, handed_back, snapshot, second = asyncio.run(two_rollouts())
    # Aborted groups go back, and so do groups accepted beyond the batch in the same step (surplus).
    m = first.metrics
    assert m["rollout/groups_aborted"] > 0
    assert m["rollout/groups_aborted"] + m["rollout/groups_surplus"] == len(handed_back)
    partial = [key for key, (status, length) in snapshot.items() if status == SampleStatus.PENDING and length]
    assert partial, "the abort should have caught some samples mid-generation"
    # Buffered groups go out first in the next rollout: a kept (even) one is either accepted,
    # finished, or aborted again and back in the buffer; either way it continued, never restarted.
    now = {(s.group_index, s.index): s for group in second.groups + parts.data_source.buffer.groups for s in group}
    kept = [key for key in partial if key[0] % 2 == 0]
    assert kept and all(now[key].response_length >= snapshot[key][1] for key in kept)
    assert any(now[key].response_length > snapshot[key][1] for key in kept)
    for sample in (s for group in second.groups for s in group):
        assert sample.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
        assert len(sample.rollout_log_probs) == sample.response_length


def test_evaluation_reports_reward_and_pass_at_k(parts_for, tmp_path):
    from slime_core.data.prompt_dataset import PromptDataset, PromptFormat

    config, parts = parts_for(n_samples_per_eval_prompt=4, eval_temperature=1.0)
    dataset = PromptDataset(str(config.prompt_data) + "@[0:3]", PromptFormat(), parts.ctx.tokenizer)
    result = asyncio.run(evaluate(config, parts, {"sums": dataset}))
    metrics = result.metrics
    assert [len(group) for group in result.groups["sums"]] == [4, 4, 4]  # every prompt's samples, for slime_log_eval
    assert set(metrics) == {"eval/sums/reward_mean", "eval/sums/pass@1", "eval/sums/pass@4"}
    assert metrics["eval/sums/pass@1"] == pytest.approx(metrics["eval/sums/reward_mean"])  # 0/1 rewards
    assert metrics["eval/sums/pass@4"] >= metrics["eval/sums/pass@1"]


def test_pass_at_k():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_an_engine_killed_mid_rollout_is_a_clear_error(parts_for, tiny_model_dir, tmp_path):
    from slime_sglang.client import EngineError
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    process, url = start_cpu_engine(tiny_model_dir, None, "--context-length", "4096", log_path=tmp_path / "engine.log")
    try:
        wait_healthy(process, url)
        config, parts = parts_for(rollout_max_response_len=2000, n_samples_per_prompt=2)
        parts.ctx = GenerateContext(EngineClient(url), parts.ctx.tokenizer, config)

        async def rollout_then_kill():
            rollout = asyncio.ensure_future(default_rollout(0, config, parts))
            while (await parts.ctx.engine.server_info())["running_requests"] == 0:
                await asyncio.sleep(0.005)
            process.kill()  # while requests are generating
            return await rollout

        with pytest.raises(EngineError, match=f"engine {url}/generate did not answer .*is it running"):
            asyncio.run(rollout_then_kill())
    finally:
        stop(process)


@pytest.mark.parametrize("engines", [1, 2])
def test_requests_in_flight_are_limited_per_engine(parts_for, engine_url, engines):
    """``--rollout-concurrency`` counts per engine: the rollout keeps that many × the engines in flight."""
    config, parts = parts_for(rollout_concurrency=2)
    parts.engines = EngineGroup([engine_url] * engines)  # the engines the rollout is handed (one, twice)
    parts.group_filter = None
    in_flight, most = 0, 0

    async def counting(sample, sampling, ctx):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await generate_sample(sample, sampling, ctx)
        finally:
            in_flight -= 1

    async def rollout():
        try:
            return await default_rollout(0, config, parts)
        finally:
            await parts.ctx.engine.close()

    parts.generate = counting
    result = asyncio.run(rollout())
    assert len(result.groups) == 4 and most == 2 * engines
