"""slime's on-policy distillation launch: its reward asks the teacher engine at ``--rm-url``
(a CPU engine, which answers SGLang's prompt log-probs) and the ``teacher_log_probs`` its
post-process sets are trained on, equal to what the native teacher (``--opd-teacher-load``,
the train backend's own forward) computes for the same weights, at temperature 1 whatever
``--rollout-temperature`` (SGLang scores prompt tokens without it); with ``--opd-teacher-load``
slime's own OPD functions select the native teacher's config; without a teacher the launch is
refused, and a teacher engine that is not there is named in the error."""

import sys
import textwrap

import pytest
import torch

from slime_core.config import ConfigError

SLIME_OPD = "slime.rollout.on_policy_distillation"
#: slime's OPD launch (examples/on_policy_distillation/run-qwen3-8B-opd.sh) without its teacher server's address
SLIME_LAUNCH = (
    "--custom-rm-path",
    f"{SLIME_OPD}.reward_func",
    "--custom-reward-post-process-path",
    f"{SLIME_OPD}.post_process_rewards",
    "--use-opd",
    "--opd-type",
    "sglang",
    "--opd-kl-coef",
    "1.0",
)
#: a user's copy of slime's OPD functions, written in slime's style (torch tensors as teacher log-probs)
OPD_COPY = textwrap.dedent("""
    import aiohttp
    import torch

    from slime.utils.types import Sample


    async def reward_func(args, sample: Sample, **kwargs):
        payload = {
            "input_ids": sample.tokens,
            "sampling_params": {
                "temperature": args.rollout_temperature,
                "max_new_tokens": 0,
                "skip_special_tokens": False,
            },
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
            teacher = torch.tensor([item[0] for item in entries], dtype=torch.float32)
            sample.teacher_log_probs = teacher[-sample.response_length:]
        SEEN.extend(samples)
        return [0.0] * len(samples), [0.0] * len(samples)


    SEEN = []
""")
COPY = ("--custom-rm-path", "my_opd.reward_func", "--custom-reward-post-process-path", "my_opd.post_process_rewards")


def test_slime_s_opd_launch_with_a_teacher_checkpoint_runs_as_the_native_teacher_run(make_config, tiny_model_dir):
    teacher = ("--opd-teacher-load", str(tiny_model_dir))
    slime_way, _ = make_config(*SLIME_LAUNCH, "--rm-url", "http://127.0.0.1:9/generate", *teacher)
    native, _ = make_config("--rm-type", "slime.opd_zero_reward", "--opd-kl-coef", "1.0", *teacher)
    assert slime_way.rm_type == native.rm_type == "slime.opd_zero_reward"
    assert slime_way.reward_post_process is native.reward_post_process is None
    slime_only = {"custom_rm_path", "custom_reward_post_process_path", "rm_url", "use_opd", "opd_type"}
    assert {k: v for k, v in slime_way.to_dict().items() if k not in slime_only} == {
        k: v for k, v in native.to_dict().items() if k not in slime_only
    }


def test_slime_s_opd_launch_with_a_teacher_engine_runs_slime_s_functions(make_config):
    config, _ = make_config(*SLIME_LAUNCH, "--rm-url", "http://127.0.0.1:9/generate")
    assert (config.rm_type, config.reward_post_process) == ("slime.custom_rm", "slime.reward_post_process")


def test_slime_s_opd_launch_without_a_teacher_says_how_to_name_one(make_config):
    with pytest.raises(ConfigError) as error:
        make_config(*SLIME_LAUNCH)
    assert len(error.value.errors) == 1
    message = str(error.value)
    assert (
        "--custom-rm-path slime.rollout.on_policy_distillation.reward_func: slime's on-policy distillation" in message
    )
    assert "give --rm-url http://HOST:PORT/generate" in message and "--opd-teacher-load TEACHER_DIR" in message


@pytest.fixture
def opd_copy(tmp_path, monkeypatch):
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "my_opd.py").write_text(OPD_COPY)
    monkeypatch.syspath_prepend(str(folder))
    yield
    sys.modules.pop("my_opd", None)


@pytest.mark.slow
def test_a_copy_of_slime_s_opd_trains_on_the_teacher_engine_s_log_probs_as_the_native_teacher(
    opd_copy, fake_loop, tiny_model_dir
):
    from slime_sglang.cpu_engine.launch import cpu_engine

    with cpu_engine(tiny_model_dir) as teacher_url:
        # the reward sends the rollout's temperature; the teacher engine scores the prompt at 1, as SGLang does
        teacher = ("--rm-url", f"{teacher_url}/generate", "--rollout-temperature", "0.7")
        records, batch = fake_loop(*COPY, *teacher, "--opd-kl-coef", "1.0", rollouts=1)
    assert records[-1]["rollout/reward_mean"] == 0.0
    # slime's tensors are kept as the core field's floats (saved samples are JSON)
    assert all(isinstance(s.teacher_log_probs, list) for s in sys.modules["my_opd"].SEEN)
    assert batch.teacher_log_probs is not None and len(batch.teacher_log_probs) == len(batch) == 4
    native = native_teacher_log_probs(tiny_model_dir, batch)
    for carried, expected in zip(batch.teacher_log_probs, native):
        torch.testing.assert_close(torch.tensor(carried), expected, atol=1e-4, rtol=0)


def native_teacher_log_probs(model_dir, batch) -> list[torch.Tensor]:
    """The teacher's log-probs as the FSDP backend computes them from --opd-teacher-load (its
    unsharded teacher, its inputs and log-prob code, temperature 1)."""
    from slime_fsdp import inputs
    from slime_fsdp.model import load_model

    teacher = load_model(str(model_dir)).eval()
    micro = inputs.padded(batch.tokens, batch.response_lengths, "cpu", 0)
    with torch.no_grad():
        return inputs.response_log_probs(teacher(**micro.model_inputs()).logits, micro, 1.0)


def test_a_teacher_engine_that_is_not_there_is_named(opd_copy, fake_loop, capsys):
    with pytest.raises(AssertionError):  # exit code 1: no reward for any sample
        fake_loop(*COPY, "--rm-url", "http://127.0.0.1:9/generate", "--opd-kl-coef", "1.0", rollouts=1)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--custom-rm-path my_opd.reward_func raised ClientConnectorError" in last
    assert "the server at --rm-url http://127.0.0.1:9/generate" in last
    assert "dynamic-sampling filter" not in last
