"""A slime user's plugin file in a real run: ``slime run`` starts Ray, the CPU engine and the
real sglang-router; the user's generate function posts to ``/generate`` at
``args.sglang_router_ip:args.sglang_router_port`` as slime's examples do, and the user's
reward and dynamic-sampling filter judge what the engine answered, and the user's advantage
function runs in the train rank's own process."""

import json
import os
import sys
import textwrap

from slime_core.cli.run import run_command
from slime_core.loop.run_dir import read_metrics
from slime_core.plugins import Plugins

USER_PLUGINS = textwrap.dedent('''
    """Written as for THUDM slime: its imports, signatures and return types."""
    import json
    import os

    from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.http_utils import post
    from slime.utils.types import Sample

    import torch

    LOG = os.path.join(os.path.dirname(__file__), "calls.jsonl")  # any process of the run finds it


    def _log(**record):
        with open(LOG, "a") as f:
            f.write(json.dumps(record) + "\\n")


    async def generate(args, sample: Sample, sampling_params, evaluation=False) -> Sample:
        state = GenerateState(args)
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
        prompt_ids = state.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
        output = await post(url, {"input_ids": prompt_ids, "sampling_params": sampling_params, "return_logprob": True})
        pairs = output["meta_info"]["output_token_logprobs"]
        sample.tokens = prompt_ids + [token for _, token, *_ in pairs]
        sample.response = output["text"]
        sample.response_length = len(pairs)
        sample.rollout_log_probs = [logprob for logprob, *_ in pairs]
        finish = output["meta_info"]["finish_reason"]["type"]
        sample.status = Sample.Status.TRUNCATED if finish == "length" else Sample.Status.COMPLETED
        _log(kind="generate", url=url, decoded=state.tokenizer.decode(sample.tokens[len(prompt_ids):]),
             response=sample.response, max_new_tokens=sampling_params["max_new_tokens"])
        return sample


    async def digit_share(args, sample: Sample, **kwargs) -> float:
        return sum(ch.isdigit() for ch in sample.response) / max(len(sample.response), 1)


    def mixed_rewards(args, samples, **kwargs) -> DynamicFilterOutput:
        rewards = [sample.get_reward_value(args) for sample in samples]
        _log(kind="filter", rewards=rewards)
        return DynamicFilterOutput(keep=len(set(rewards)) > 1, reason="zero_std")


    def no_advantage(args, rollout_data):
        """Zero advantages: the policy-gradient term of every token is exactly 0."""
        _log(kind="advantage", pid=os.getpid(), samples=len(rollout_data["rewards"]))
        rollout_data["advantages"] = [torch.zeros_like(kl) for kl in rollout_data["kl"]]
        rollout_data["returns"] = rollout_data["advantages"]
''')


def test_a_slime_plugin_file_runs_unchanged_through_ray_the_router_and_the_engine(
    ray_cluster, tiny_model_dir, tmp_path, monkeypatch
):
    (tmp_path / "user_plugins.py").write_text(USER_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_plugins", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # as a launch script would, for every process of the run
    log = tmp_path / "calls.jsonl"
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(10) for b in range(10))
    )
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-engine",
        "cpu",
        "--router",
        "sglang",
        "--custom-generate-function-path",
        "user_plugins.generate",
        "--custom-rm-path",
        "user_plugins.digit_share",
        "--dynamic-sampling-filter-path",
        "user_plugins.mixed_rewards",
        "--custom-advantage-function-path",
        "user_plugins.no_advantage",
        "--over-sampling-batch-size",
        "6",
        "--rollout-batch-size",
        "4",
        "--n-samples-per-prompt",
        "4",
        "--rollout-max-response-len",
        "6",
        "--num-rollout",
        "2",
        "--lr",
        "1e-3",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "1024",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    assert run_command(argv, Plugins()) == 0

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    generated = [c for c in calls if c["kind"] == "generate"]
    assert len(generated) >= 2 * 4 * 4  # two rollouts of four groups of four, at least
    assert all(c["decoded"] == c["response"] and c["max_new_tokens"] == 6 for c in generated)
    routers = {c["url"] for c in generated}
    assert len(routers) == 1 and not routers.pop().endswith(":None/generate")
    filtered = [c for c in calls if c["kind"] == "filter"]
    assert filtered and all(len(c["rewards"]) == 4 for c in filtered)

    advantages = [c for c in calls if c["kind"] == "advantage"]
    assert advantages and all(c["pid"] != os.getpid() for c in advantages)  # in the rank, not the driver
    assert sum(c["samples"] for c in advantages) == 2 * 16

    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout_id"] for r in records] == [0, 1]
    assert all(r["rollout/samples"] == 16 for r in records)
    # The user's token ids and log-probs reached training as the engine produced them: the
    # trainer scores the same tokens with the same weights, so the gap is float noise.
    assert all(r["train/train_rollout_logprob_abs_diff"] < 1e-3 for r in records)
    assert all(r["train/pg_loss"] == 0.0 for r in records)  # the user's advantages were the ones trained on


TEXT_GENERATE = textwrap.dedent('''
    """Posts the prompt as text, as slime's search-r1 and retool generate functions do."""
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.http_utils import post
    from slime.utils.types import Sample


    async def generate(args, sample: Sample, sampling_params) -> Sample:
        state = GenerateState(args)
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
        prompt_ids = state.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
        output = await post(url, {"text": sample.prompt, "sampling_params": sampling_params, "return_logprob": True})
        pairs = output["meta_info"]["output_token_logprobs"]
        sample.tokens = prompt_ids + [token for _, token, *_ in pairs]
        sample.response = output["text"]
        sample.response_length = len(pairs)
        sample.rollout_log_probs = [logprob for logprob, *_ in pairs]
        sample.status = Sample.Status.COMPLETED
        return sample
''')


def test_a_slime_generate_function_posting_text_trains_through_the_router_and_the_engine(
    ray_cluster, tiny_model_dir, tmp_path, monkeypatch
):
    """The CPU engine tokenises a text prompt as SGLang does: the tokens slime's function pairs
    with its own tokenisation of the prompt are the ones the engine scored (train and rollout
    log-probs agree)."""
    (tmp_path / "text_generate.py").write_text(TEXT_GENERATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "text_generate", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "label": str(2 * a)}) + "\n" for a in range(8)))
    argv = [
        "--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--rollout-engine", "cpu",
        "--router", "sglang", "--custom-generate-function-path", "text_generate.generate", "--rm-type", "math",
        "--rollout-batch-size", "2", "--n-samples-per-prompt", "2", "--rollout-max-response-len", "6",
        "--num-rollout", "1", "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    assert run_command(argv, Plugins()) == 0
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["rollout_id"] >= 0]
    assert [r["rollout/samples"] for r in records] == [4]
    assert records[0]["train/train_rollout_logprob_abs_diff"] < 1e-3
