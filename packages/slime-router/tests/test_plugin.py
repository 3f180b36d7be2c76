import pytest

from slime_core.testing import check_plugin_installed
from slime_router import balancer


def test_found_through_its_entry_point_and_light_to_import():
    check_plugin_installed("router", "slime-router")


def test_router_options_and_their_checks(make_run_config):
    config = make_run_config(router_middleware=["sessions", "retry"], router_policy="round_robin", router_dp_aware=True)
    assert config.router_middleware == ["sessions", "retry"] and config.router_middleware_retries == 2
    assert config.router_args == {"policy": "round_robin", "dp_aware": True}  # undeclared --router-* pass through
    from slime_core.config import ConfigError

    with pytest.raises(ConfigError) as error:
        make_run_config(sglang_router_ip="10.0.0.1", router_middleware_retries=-1, router_middleware_timeout=0)
    assert "give both or neither" in str(error.value) and "must be >= 0" in str(error.value)
    assert "positive number of seconds" in str(error.value)


def test_sglang_router_command_line_from_defaults_and_passthrough():
    options = balancer.router_options(
        {"policy": "round_robin", "dp_aware": True, "port": "31000"}, ["http://127.0.0.1:1"]
    )
    argv = balancer.command(options)
    assert argv[1:3] == ["-m", "slime_router.rust_router"]
    joined = " ".join(argv)
    assert "--host 127.0.0.1" in joined and "--prometheus-host 127.0.0.1" in joined and "--port 31000" in joined
    assert "--policy round_robin" in joined and "--dp-aware" in joined and "--dp-aware True" not in joined
    assert "--worker-urls http://127.0.0.1:1" in joined and "--prometheus-port " in joined


def test_slime_s_router_launcher_takes_every_flag_of_sglang_router_s():
    """`slime_router.rust_router` starts the same Rust router without the official launcher's
    Python balancer; the flags a user passes with --router-* must all still be understood."""
    import re
    import subprocess
    import sys

    def flags(module: str, *extra: str) -> tuple[set[str], str]:
        out = subprocess.run(
            [sys.executable, "-m", module, *extra, "--help"], capture_output=True, text=True, check=True
        ).stdout
        return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out)), out

    ours, our_help = flags("slime_router.rust_router")
    official, _ = flags("sglang_router.launch_router")
    assert len(official) > 40 and ours == official
    official_only = "SGLang Router - High-performance request distribution"  # the official launcher's description
    assert official_only not in our_help
    assert official_only in flags("slime_router.rust_router", "--mini-lb")[1]  # handed to the official launcher
