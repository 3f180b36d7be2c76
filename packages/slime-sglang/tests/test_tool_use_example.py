"""The shipped tool-use example (examples/tool_use) against a real CPU engine.

A tiny random model is first warmed up on calculator transcripts (a few hundred supervised
steps, as the example's warmup.py does), so that it really emits tool calls; then the default
rollout runs with the example's config, generate function and reward."""

from __future__ import annotations

import asyncio
import sys
from fractions import Fraction
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # the example's modules import as examples.tool_use.*, as with PYTHONPATH=.
    sys.path.insert(0, str(ROOT))

from examples.tool_use.calculator import CalculatorError, evaluate, pending_call, tool_result  # noqa: E402
from examples.tool_use.reward import final_answer_reward  # noqa: E402

EXAMPLE = ROOT / "examples" / "tool_use"
TEMPERATURE = 0.8


def test_the_calculator_evaluates_arithmetic_and_nothing_else():
    assert evaluate("12+7") == 19 and evaluate("-(2-5)*3") == 9 and evaluate("7/2") == Fraction(7, 2)
    assert evaluate(" 2 * (3 + 4) - 10 / 4 ") == Fraction(23, 2)
    assert tool_result("7/2") == "<result>3.5</result>" and tool_result("1/3") == "<result>0.333333</result>"
    for bad, why in [
        ("3/0", "division by zero"),
        ("2**3", "unexpected '\\*'"),
        ("__import__('os')", "unexpected '_'"),
        ("(1+2", "ends too early"),
        ("1 2", "unexpected '2'"),
        ("9" * 65, "longer than 64"),
    ]:
        with pytest.raises(CalculatorError, match=why):
            evaluate(bad)
    assert tool_result("3/0") == "<result>error: division by zero</result>"
    assert (
        pending_call("23*7=<calc>23*7</calc>") == "23*7" and pending_call("<calc>1</calc><result>1</result>1") is None
    )


def test_the_reward_grades_the_answer_after_the_last_tool_result():
    from slime_core.sample import Sample

    grade = lambda response: final_answer_reward(Sample(response=response, label="161"), None)  # noqa: E731
    assert grade("<calc>23*7</calc><result>161</result>161") == 1.0
    assert grade("<calc>23*7</calc><result>161</result>160") == 0.0  # the tool was right, the answer is not
    assert grade("161") == 1.0 and grade("<calc>23*7</calc><result>161</result>") == 0.0


@pytest.fixture(scope="module")
def warmed_up(tiny_model_dir, tmp_path_factory):
    """The tiny model after the example's warm-up (300 supervised steps on its training
    transcripts), and a CPU engine serving it: started on the random model while the warm-up
    trains, then loaded with the result from disk. Yields the model's folder and the URL."""
    import json

    import httpx
    import torch

    from examples.tool_use.warmup import warm_up
    from slime_core.tools.tiny_models import build_tiny_qwen3
    from slime_sglang.cpu_engine.launch import start_cpu_engine, stop, wait_healthy

    process, url = start_cpu_engine(tiny_model_dir, None, "--num-threads", "1")
    try:
        records = [json.loads(line) for line in (EXAMPLE / "data" / "multiply_train.jsonl").read_text().splitlines()]
        model_dir = build_tiny_qwen3(tmp_path_factory.mktemp("tool-model"))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # faster than two threads on a shared 2-core machine
        try:
            warm_up(model_dir, records)
        finally:
            torch.set_num_threads(threads)
        wait_healthy(process, url)
        loaded = httpx.post(f"{url}/update_weights_from_disk", json={"model_path": str(model_dir)}, timeout=60)
        assert loaded.json()["success"], loaded.text
        yield model_dir, url
    finally:
        stop(process)


@pytest.fixture(scope="module")
def rollout(warmed_up):
    """One default rollout (4 prompts x 2 samples) with the example's config on a CPU engine
    serving the warmed-up model: the config, the groups, and the generate function used."""
    from transformers import AutoTokenizer

    from slime_core.config import OptionSet, load_config
    from slime_core.data.source import PromptDataSource
    from slime_core.plugins import Plugins
    from slime_core.plugins.custom_paths import apply_custom_paths
    from slime_core.rollout.default import default_rollout
    from slime_core.rollout.parts import GenerateContext, RolloutParts
    from slime_core.rollout.reward_hub import RewardHub
    from slime_sglang.client import EngineClient

    model_dir, url = warmed_up
    plugins = Plugins()
    options = OptionSet()
    plugins.add_options(options)
    eval_data = str(EXAMPLE / "data" / "multiply_eval.jsonl")
    config = load_config(
        [
            str(EXAMPLE / "calculator.yaml"),
            "--prompt-data",
            eval_data,
            "--eval-prompt-data",
            "multiply",
            eval_data,
            "--hf-checkpoint",
            str(model_dir),
            "--rollout-batch-size",
            "4",
            "--n-samples-per-prompt",
            "2",
            "--global-batch-size",
            "8",
            "--rollout-temperature",
            str(TEMPERATURE),
        ],
        options,
        plugins,
    )
    apply_custom_paths(config, plugins)
    generate = plugins.registry("generate_functions").get(config.generate_function)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    async def one_rollout():
        client, reward_hub = EngineClient(url), RewardHub(config, plugins)
        parts = RolloutParts(
            PromptDataSource.from_config(config, tokenizer),
            reward_hub,
            generate,
            None,
            GenerateContext(client, tokenizer, config),
        )
        try:
            return await default_rollout(0, config, parts)
        finally:
            await client.close()
            reward_hub.close()

    return config, asyncio.run(one_rollout()).groups, generate


@pytest.mark.integration
def test_the_example_config_selects_the_tool_loop_and_the_rollout_returns_its_groups(rollout):
    from examples.tool_use.multi_turn import generate as tool_loop
    from slime_core.rollout_batch import RolloutBatch

    config, groups, generate = rollout
    assert generate is tool_loop
    assert len(groups) == config.rollout_batch_size and all(len(group) == 2 for group in groups)
    batch = RolloutBatch.from_samples([sample for group in groups for sample in group])
    assert len(batch) == 8 and any(0 in mask for mask in batch.loss_masks)  # the train side takes them as they are


@pytest.mark.integration
def test_the_model_calls_the_tool_and_the_results_are_context_not_training_data(rollout, tokenizer):
    from slime_core.sample import SampleStatus

    samples = [sample for group in rollout[1] for sample in group]
    called = [sample for sample in samples if sample.metadata.get("tool_calls")]
    assert len(called) >= 6, [sample.response for sample in samples]  # the warmed-up model uses its tool
    for sample in called:
        sample.check()
        assert sample.weight_versions == [0]
        # sampled at 0.8, the tiny model now and then goes on after its answer and stops at a limit
        # (truncated: one of eight, and in one CI run two): most stop at their answer
        assert sample.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED), sample.status
    completed = [sample for sample in called if sample.status == SampleStatus.COMPLETED]
    assert 2 * len(completed) >= len(called), [sample.response for sample in called]
    for sample in called:
        response = sample.tokens[sample.prompt_length :]
        masked = [token for token, mask in zip(response, sample.loss_mask) if mask == 0]
        expression = pending_call(sample.response.partition("<result>")[0])
        assert tool_result(expression) in sample.response
        first_result = tokenizer.decode(masked)[: len(tool_result(expression))]
        assert first_result == tool_result(expression)  # the tool's answer is context, untrained
        if sample.status == SampleStatus.COMPLETED:  # one call: exactly its answer is untrained
            assert tokenizer.decode(masked) == tool_result(expression)
        assert all(lp == 0.0 for lp, mask in zip(sample.rollout_log_probs, sample.loss_mask) if mask == 0)
        assert sum(sample.loss_mask) == len(response) - len(masked) > 0  # the model's own tokens are trained on


@pytest.mark.integration
def test_rollout_log_probs_of_the_model_tokens_are_the_engines(rollout, warmed_up, one_torch_thread):
    """Teacher-forcing each whole multi-turn sequence gives back every model token's log-prob."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(warmed_up[0], dtype=torch.float32).eval()
    for sample in (sample for group in rollout[1] for sample in group):
        with torch.no_grad():
            logits = model(torch.tensor([sample.tokens])).logits[0, sample.prompt_length - 1 : -1]
        log_probs = torch.log_softmax(logits / TEMPERATURE, dim=-1)
        expected = log_probs.gather(-1, torch.tensor(sample.tokens[sample.prompt_length :])[:, None])[:, 0]
        trained = torch.tensor(sample.loss_mask, dtype=torch.bool)
        assert torch.allclose(torch.tensor(sample.rollout_log_probs)[trained], expected[trained], atol=1e-4)


@pytest.mark.integration
def test_the_reward_is_the_final_answer_s(rollout):
    from examples.tool_use.reward import final_answer

    samples = [sample for group in rollout[1] for sample in group]
    assert all(sample.reward == float(final_answer(sample.response) == sample.label) for sample in samples)
    assert sum(sample.reward for sample in samples) >= 4  # most answers copy the tool's result correctly


@pytest.mark.integration
def test_length_and_tool_call_limits_truncate(warmed_up, tokenizer):
    from examples.tool_use.multi_turn import generate_with_tools
    from slime_core.engine import SamplingParams
    from slime_core.rollout.parts import GenerateContext
    from slime_core.sample import Sample, SampleStatus
    from slime_sglang.client import EngineClient

    async def run(max_new_tokens, max_tool_calls):
        client = EngineClient(warmed_up[1])
        sample = Sample(group_index=0, index=0, prompt="75*7=", label="525")  # a training prompt: greedy gets it right
        await generate_with_tools(
            sample,
            SamplingParams(max_new_tokens=max_new_tokens, temperature=0),
            GenerateContext(client, tokenizer, None),
            max_tool_calls,
        )
        await client.close()
        return sample

    short, no_calls, full = (asyncio.run(run(*limits)) for limits in [(8, 3), (48, 0), (48, 3)])
    assert short.status == SampleStatus.TRUNCATED and short.response_length == 8 and 0 not in short.loss_mask
    assert no_calls.status == SampleStatus.TRUNCATED and no_calls.response == "<calc>75*7</calc>"
    assert 0 not in no_calls.loss_mask
    assert full.status == SampleStatus.COMPLETED and full.response == "<calc>75*7</calc><result>525</result>525"
