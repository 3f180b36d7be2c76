"""``--sglang-config`` (slime's YAML deployment of the rollout servers) and ``--prefill-num-servers``
through the real config parser: what is started from them, and each refusal with its file and key."""

from __future__ import annotations

import pytest

from slime_core.config import ConfigError
from slime_core.testing import make_config
from slime_sglang.backend import sglang_backend
from slime_sglang.deployment import engine_configs


@pytest.fixture
def config_with(tmp_path, tiny_model_dir):
    """``config_with(yaml_text, **options)``: the run's config with that file as ``--sglang-config``."""
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')

    def config(text: str | None = None, **options):
        if text is not None:
            (tmp_path / "sglang.yaml").write_text(text)
            options["sglang_config"] = tmp_path / "sglang.yaml"
        options.setdefault("rollout_engine", "cpu")
        return make_config(data, tiny_model_dir, rollout_batch_size=1, **options)

    return config


def problems(config_with, text: str | None = None, **options) -> str:
    with pytest.raises(ConfigError) as error:
        config_with(text, **options)
    return str(error.value)


GROUPS = """\
sglang:
  - name: actor
    num_gpus_per_engine: 1
    engine_groups:
      - {worker_type: regular, num_gpus: 2, overrides: {max_running_requests: 3}}
      - {worker_type: placeholder, num_gpus: 2}
      - {worker_type: regular, num_gpus: 1, overrides: {context_length: 64}}
"""


def test_each_group_s_engines_get_its_overrides_and_placeholders_reserve_idle_slots(config_with):
    config = config_with(GROUPS, rollout_num_gpus=5, sglang_max_running_requests=7)
    assert [engine.sglang for engine in engine_configs(config)] == [
        {"max_running_requests": 3},
        {"max_running_requests": 3},
        {"max_running_requests": "7", "context_length": 64},  # the flag, as passed through
    ]
    assert sglang_backend.engine_bundles(config, gpu=False) == [{"CPU": 1}] * 5  # 3 engines, then 2 idle slots
    assert "config" not in config.sglang  # no longer passed to SGLang as its own --config


def test_a_malformed_deployment_names_the_file_and_the_key(config_with, tmp_path):
    text = GROUPS.replace("placeholder", "prefil").replace("context_length: 64", "model_path: /elsewhere")
    message = problems(config_with, text, rollout_num_gpus=5)
    assert (
        f"--sglang-config {tmp_path / 'sglang.yaml'}: sglang[0] (actor).server_groups[1]: worker_type 'prefil'"
        in message
    )
    assert "different model_path values" in message
    assert "hold 5 GPUs and --rollout-num-gpus is 4" in problems(config_with, GROUPS, rollout_num_gpus=4)
    idle = "sglang:\n  - {name: actor, server_groups: [{worker_type: placeholder, num_gpus: 1}]}\n"
    assert "starts no engine (placeholder groups only)" in problems(config_with, idle, rollout_num_gpus=1)
    assert "overrides ['mem_fraction_static'] would change nothing" in problems(
        config_with, GROUPS.replace("context_length", "mem_fraction_static"), rollout_num_gpus=5
    )


def test_disaggregated_and_frozen_models_are_refused_with_the_reason(config_with):
    pd = GROUPS.replace("placeholder", "prefill").replace(
        "worker_type: regular, num_gpus: 1", "worker_type: decode, num_gpus: 1"
    )
    assert "worker_type prefill, decode: prefill/decode disaggregation" in problems(config_with, pd, rollout_num_gpus=5)
    frozen = GROUPS + "  - {name: ref, model_path: /ref, server_groups: [{worker_type: regular, num_gpus: 1}]}\n"
    assert "frozen extra models are not started yet" in problems(config_with, frozen, rollout_num_gpus=6)
    # slime's --prefill-num-servers: a prefill group and a decode group, refused for the same reason
    assert "--prefill-num-servers: model default: worker_type prefill, decode: prefill/decode" in problems(
        config_with, prefill_num_servers=1, rollout_num_gpus=2
    )


def test_the_deployment_flags_exclude_each_other_as_in_slime(config_with):
    message = problems(config_with, GROUPS, rollout_num_gpus=5, prefill_num_servers=1)
    assert "--sglang-config and --prefill-num-servers each say which engines serve the run" in message
    message = problems(config_with, GROUPS, rollout_external_engine_addrs="127.0.0.1:1")
    assert "--sglang-config and --rollout-external-engine-addrs" in message


def test_a_real_sglang_server_of_a_group_is_launched_with_its_size_and_overrides(config_with):
    """``--rollout-engine sglang`` (GPU only): each group's server command carries the group's
    ``--tp-size`` and its overrides over the run's ``--sglang-*`` options. Engines of different
    sizes take weights from disk here (a broadcast gives every engine as many ranks)."""
    from slime_sglang.servers import sglang_command

    text = GROUPS.replace(
        "num_gpus: 1, overrides: {context_length: 64}",
        "num_gpus: 2, num_gpus_per_engine: 2, overrides: {context_length: 64, enable_torch_compile: true}",
    )
    options = dict(rollout_engine="sglang", rollout_num_gpus=6, sglang_mem_fraction_static=0.7)
    assert "engines of different sizes [1, 2]" in problems(config_with, text, **options)
    config = config_with(text, update_weight_transport="disk", **options)
    commands = [sglang_command(engine, "/m", 30001)[3:] for engine in engine_configs(config)]
    assert len(commands) == 3 and commands[0] == [
        *"--model-path /m --host 127.0.0.1 --port 30001 --tp-size 1".split(),
        *"--mem-fraction-static 0.7 --max-running-requests 3".split(),
    ]
    assert commands[2][6:] == [
        *"--tp-size 2 --mem-fraction-static 0.7 --context-length 64 --enable-torch-compile".split()
    ]
