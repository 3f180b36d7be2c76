"""slime's on-policy distillation launch: slime's own OPD functions select the native teacher
(``--opd-teacher-load``) with the native run's config, and are refused without one; a copy of
them, written in slime's style, asks the teacher server at ``--rm-url`` (a CPU engine, which
answers SGLang's prompt log-probs) and stops the run, naming the post-process, when its
``teacher_log_probs`` would not be trained on."""

import sys
import textwrap

import pytest
import torch

from slime_core.config import ConfigError

SLIME_OPD = "slime.rollout.on_policy_distillation"
#: slime's OPD launch (examples/on_policy_distillation/run-qwen3-8B-opd.sh), teacher server and all
SLIME_LAUNCH = (
    "--custom-rm-path",
    f"{SLIME_OPD}.reward_func",
    "--custom-reward-post-process-path",
    f"{SLIME_OPD}.post_process_rewards",
    "--rm-url",
    "http://127.0.0.1:9/generate",
    "--use-opd",
    "--opd-type",
    "sglang",
    "--opd-kl-coef",
    "1.0",
)
#: a user's copy of slime's OPD functions, written in slime's style
OPD_COPY = textwrap.dedent("""
    import aiohttp

    from slime.utils.types import Sample


    async def reward_func(args, sample: Sample, **kwargs):
        payload = {
            "input_ids": sample.tokens,
            "sampling_params": {"temperature": args.rollout_temperature, "max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        async with aiohttp.ClientSession() as session:
            async with session.post(args.rm_url, json=payload) as resp:
                resp.raise_for_status()
                return await resp.json()


    def post_process_rewards(args, samples: list[Sample], **kwargs):
        for sample in samples:
            entries = sample.get_reward_value(args)["meta_info"]["input_token_logprobs"][1:]
            sample.teacher_log_probs = [logprob for logprob, *_ in entries][-sample.response_length:]
        SEEN.extend((list(sample.tokens), sample.response_length, sample.teacher_log_probs) for sample in samples)
        return [0.0] * len(samples), [0.0] * len(samples)


    SEEN = []
""")


def test_slime_s_opd_launch_runs_as_the_native_teacher_run(make_config, tiny_model_dir):
    teacher = ("--opd-teacher-load", str(tiny_model_dir))
    slime_way, _ = make_config(*SLIME_LAUNCH, *teacher)
    native, _ = make_config("--rm-type", "slime.opd_zero_reward", "--opd-kl-coef", "1.0", *teacher)
    assert slime_way.rm_type == native.rm_type == "slime.opd_zero_reward"
    assert slime_way.reward_post_process is native.reward_post_process is None
    slime_only = {"custom_rm_path", "custom_reward_post_process_path", "rm_url", "use_opd", "opd_type"}
    assert {k: v for k, v in slime_way.to_dict().items() if k not in slime_only} == {
        k: v for k, v in native.to_dict().items() if k not in slime_only
    }


def test_slime_s_opd_launch_without_a_teacher_checkpoint_says_to_add_one(make_config):
    with pytest.raises(ConfigError) as error:
        make_config(*SLIME_LAUNCH)
    assert len(error.value.errors) == 1
    assert "--custom-rm-path slime.rollout.on_policy_distillation.reward_func: slime's on-policy distillation" in str(
        error.value
    )
    assert "add --opd-teacher-load TEACHER_DIR" in str(error.value)


@pytest.fixture
def opd_copy(tmp_path, monkeypatch):
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "my_opd.py").write_text(OPD_COPY)
    monkeypatch.syspath_prepend(str(folder))
    yield
    sys.modules.pop("my_opd", None)


def test_a_copy_of_slime_s_opd_asks_the_teacher_engine_and_needs_the_teacher_to_train(
    opd_copy, fake_loop, tiny_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM

    from slime_sglang.cpu_engine.launch import cpu_engine

    copy = (
        "--custom-rm-path",
        "my_opd.reward_func",
        "--custom-reward-post-process-path",
        "my_opd.post_process_rewards",
    )
    with cpu_engine(tiny_model_dir) as teacher_url:
        rm_url = ("--rm-url", f"{teacher_url}/generate")
        with pytest.raises(AssertionError):  # exit code 1: the run stops
            fake_loop(*copy, *rm_url, rollouts=1)
        records, _ = fake_loop(
            *copy, *rm_url, "--opd-teacher-load", str(tiny_model_dir), "--opd-kl-coef", "1.0", rollouts=1, output="t"
        )
    assert records[-1]["rollout/reward_mean"] == 0.0
    seen = sys.modules["my_opd"].SEEN
    teacher = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    tokens, response_length, teacher_log_probs = seen[0]
    with torch.no_grad():
        logits = teacher(torch.tensor([tokens])).logits[0, -response_length - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[-response_length:])[:, None]).squeeze(-1)
    torch.testing.assert_close(torch.tensor(teacher_log_probs), expected, atol=1e-4, rtol=0)
