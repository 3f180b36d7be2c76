"""What a run with ``--rollout-backend vllm`` is refused at config time, each with its fix."""

import pytest

from slime_core.config import ConfigError
from slime_core.testing import make_config


def _errors(tmp_path, **overrides) -> str:
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    with pytest.raises(ConfigError) as refused:
        make_config(data, tmp_path, rollout_batch_size=1, rollout_backend="vllm", **overrides)
    return str(refused.value)


def test_top_p_and_a_missing_interpreter_are_refused_with_the_fix_and_routers_are_not(tmp_path):
    errors = _errors(
        tmp_path,
        router="sglang",
        rollout_top_p=0.9,
        vllm_python=str(tmp_path / "nowhere" / "python"),
    )
    assert (
        "not vLLM" not in errors
    )  # the routers are not refused: the servers speak SGLang's /generate (slime_vllm.sglang_route)
    assert "--rollout-top-p < 1" in errors
    assert "no such interpreter" in errors


def test_the_token_leaves_generation_open_on_one_node_only():
    """The vLLM server's guard takes slime's two keys as SGLang does: with the admin key alone (a run on
    one node) SGLang's /generate stays open, as slime-router's front keeps it (its ``sessions``
    middleware sends /generate without a key: ``test_vllm_router.py``); with the API key (across nodes)
    every route but liveness wants it."""
    from slime_vllm.serve import OPEN_ROUTES, open_routes

    assert "/generate" in open_routes(None) and "/pause" not in open_routes(None)
    assert open_routes("api-key") == OPEN_ROUTES and "/generate" not in OPEN_ROUTES


def test_vllm_flags_slime_does_not_declare_go_to_vllm_s_server(tmp_path):
    from slime_vllm.servers import server_command

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(
        data,
        tmp_path,
        rollout_batch_size=1,
        rollout_backend="vllm",
        router="none",
        vllm_python="/bin/sh",
        vllm_max_num_seqs=7,
        vllm_enable_prefix_caching=True,
    )
    assert config.vllm == {"max_num_seqs": "7", "enable_prefix_caching": True}
    argv = server_command("/usr/bin/python3", "/m", 8000, "127.0.0.1", 0, config.vllm)
    assert argv[argv.index("--max-num-seqs") + 1] == "7" and "--enable-prefix-caching" in argv
    assert "--no-enable-chunked-prefill" in argv and "--enforce-eager" in argv
    assert any(arg.startswith("VLLM_CPU_KVCACHE_SPACE=") for arg in argv)  # slime's KV cache size on CPU, unless
    sized = server_command("/usr/bin/python3", "/m", 8000, "127.0.0.1", 0, {"kv_cache_memory_bytes": "67108864"})
    assert not any(arg.startswith("VLLM_CPU_KVCACHE_SPACE=") for arg in sized)  # the flag sizes it (it would win)
    assert argv[argv.index("--worker-extension-cls") + 1] == "slime_vllm.worker_extension.SlimeWorkerExtension"


def test_delta_weight_updates_are_refused_for_vllm_engines(tmp_path):
    errors = _errors(tmp_path, update_weight_mode="delta", update_weight_local_checkpoint_dir=str(tmp_path / "copy"))
    assert "--update-weight-mode delta needs engines that apply deltas" in errors


def test_weight_updates_to_vllm_default_to_broadcast_unless_colocated_or_named(tmp_path):
    """vLLM's engines prefer the gloo broadcast (their tensor route is base64 over HTTP, several
    times slower on CPU); an explicit --update-weight-transport wins, a colocated run keeps slime-core's
    ``tensor``, and engines that name no preference (SGLang's, the CPU engine) keep ``tensor`` on CPU."""
    from slime_core.cluster.network import Network
    from slime_core.loop.weight_sync import WeightSync, default_transport
    from slime_core.rollout.engine_control import EngineControl
    from slime_vllm.engines import VLLMEngines

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    engines = EngineControl(VLLMEngines(["http://127.0.0.1:1"], [], None, Network(False, None), 0), loop=None)

    def transport(colocate: bool = False, **overrides) -> tuple[str, list[str]]:
        config = make_config(data, tmp_path, rollout_batch_size=1, rollout_backend="vllm", **overrides)
        said: list[str] = []
        sync = WeightSync(config.replace(colocate=colocate), None, engines, tmp_path, gpu=False, log=said.append)
        return sync.transport, said

    chosen, said = transport()
    assert chosen == "broadcast"
    assert said == ["slime run: weight updates by broadcast (the default here; --update-weight-transport picks one)"]
    assert transport(update_weight_transport="tensor") == ("tensor", [])
    assert transport(colocate=True)[0] == "tensor"
    sglang_config = make_config(data, tmp_path, rollout_batch_size=1)
    assert default_transport(sglang_config, VLLMEngines.transports, gpu=False) == "tensor"
