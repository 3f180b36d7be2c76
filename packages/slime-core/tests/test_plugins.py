import inspect
import textwrap

import pytest

from slime_core import hookspecs
from slime_core.plugins import PluginError, Plugins, RegistryError
from slime_core.plugins.custom_paths import apply_custom_paths


@pytest.fixture
def local_module(tmp_path, monkeypatch):
    """Write a plugin module to a temporary folder on sys.path; return a writer."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name, body):
        (tmp_path / f"{name}.py").write_text("from slime_core import hookimpl\n" + textwrap.dedent(body))
        return name

    return write


REWARD_PLUGIN = """
@hookimpl
def slime_register_reward_functions(register):
    register("always_one", always_one)
    register("lazy", "json:dumps")

def always_one(sample, config):
    return 1.0
"""


def test_local_module_with_p_registers_and_resolves(local_module):
    plugins = Plugins([local_module("plug_local", REWARD_PLUGIN)])
    registry = plugins.registry("reward_functions")
    assert registry.get("always_one")(None, None) == 1.0
    import json

    assert registry.get("lazy") is json.dumps
    entry = registry.entry("always_one")
    assert (entry.plugin, entry.distribution) == ("plug_local", "local module")
    described = {p["name"]: p for p in plugins.describe()}
    assert described["plug_local"]["hooks"] == ["slime_register_reward_functions"]
    assert described["plug_local"]["registers"] == {"reward_functions": ["always_one", "lazy"]}


def test_unregister_removes_registrations(local_module):
    plugins = Plugins([local_module("plug_unreg", REWARD_PLUGIN)])
    try:
        assert "always_one" in plugins.registry("reward_functions")
    finally:
        plugins.unregister("plug_unreg")
    assert "always_one" not in plugins.registry("reward_functions")


def test_duplicate_names_name_both_plugins(local_module):
    first = local_module("plug_a", REWARD_PLUGIN)
    second = local_module("plug_b", REWARD_PLUGIN)
    plugins = Plugins([first, second])
    with pytest.raises(RegistryError) as info:
        plugins.registry("reward_functions")
    message = str(info.value)
    assert "reward function 'always_one' is registered twice" in message
    assert "plugin 'plug_a' (local module)" in message and "plugin 'plug_b' (local module)" in message


def test_unknown_name_lists_available_and_suggests(local_module):
    registry = Plugins([local_module("plug_s", REWARD_PLUGIN)]).registry("reward_functions")
    with pytest.raises(RegistryError, match="unknown reward function 'always_on'; did you mean 'always_one'"):
        registry.get("always_on")


def test_blocked_plugins_are_not_loaded(local_module, monkeypatch):
    name = local_module("plug_blocked", REWARD_PLUGIN)
    monkeypatch.setenv("SLIME_BLOCK_PLUGINS", f"other, {name}")
    plugins = Plugins([name])
    assert name not in plugins.info
    assert "always_one" not in plugins.registry("reward_functions")


def test_core_cannot_be_blocked(monkeypatch):
    monkeypatch.setenv("SLIME_BLOCK_PLUGINS", "core")
    with pytest.raises(PluginError, match="cannot be blocked"):
        Plugins()


def test_autoload_switch_keeps_only_core(monkeypatch):
    monkeypatch.setenv("SLIME_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert list(Plugins().info) == ["core"]
    monkeypatch.delenv("SLIME_DISABLE_PLUGIN_AUTOLOAD")
    assert {"core", "fsdp", "megatron", "sglang", "rewards", "router"} <= set(Plugins().info)


def test_misspelled_hook_is_an_error(local_module):
    name = local_module("plug_typo", "@hookimpl\ndef slime_register_reward_function(register):\n    pass\n")
    with pytest.raises(PluginError, match="plugin 'plug_typo' implements a hook slime does not define"):
        Plugins([name])


def test_missing_module_is_a_clear_error():
    with pytest.raises(PluginError, match="-p no_such_plugin_mod: cannot import it"):
        Plugins(["no_such_plugin_mod"])


def test_a_failing_hook_names_its_plugin(local_module):
    name = local_module(
        "plug_fail", "@hookimpl\ndef slime_before_rollout(rollout_id, config):\n    raise KeyError('boom')\n"
    )
    with pytest.raises(
        PluginError, match=r"plugin 'plug_fail' \(local module\) failed in slime_before_rollout: KeyError"
    ):
        Plugins([name]).before_rollout(0, None)


def test_lifecycle_hooks_reach_plugins_with_their_arguments(local_module):
    body = """
    calls = []

    @hookimpl
    def slime_after_train_step(rollout_id, step, metrics):
        metrics["seen"] = (rollout_id, step)
        calls.append("after_train_step")

    @hookimpl
    def slime_after_save(path, rollout_id):
        calls.append(("after_save", path))
    """
    plugins = Plugins([local_module("plug_life", body)])
    metrics = {}
    plugins.after_train_step(3, 1, metrics)
    plugins.after_save(3, "/ckpt")
    module = plugins.info["plug_life"].module
    assert metrics == {"seen": (3, 1)}
    assert module.calls == ["after_train_step", ("after_save", "/ckpt")]


def test_trace_switch_prints_hook_calls(local_module, monkeypatch, capsys):
    monkeypatch.setenv("SLIME_TRACE_HOOKS", "1")
    Plugins([local_module("plug_trace", REWARD_PLUGIN)]).registry("reward_functions")
    assert "slime hook: slime_register_reward_functions -> plugin 'plug_trace'" in capsys.readouterr().err


def test_custom_path_registers_a_one_off_function(options, write_jsonl, local_module):
    from slime_core.config import load_config

    local_module("my_rewards", "def score(sample, config):\n    return 0.5\n")
    plugins = Plugins()
    argv = [
        "--prompt-data",
        str(write_jsonl([{"prompt": "x", "label": "y"}])),
        "--hf-checkpoint",
        "m",
        "--rollout-batch-size",
        "1",
        "--rm-type",
        "my_rewards.score",
    ]
    config = load_config(argv, options, plugins)
    apply_custom_paths(config, plugins)
    assert config.rm_type == "my_rewards.score"
    registry = plugins.registry("reward_functions")
    assert registry.get("my_rewards.score")(None, None) == 0.5
    assert registry.entry("my_rewards.score").plugin == "custom-paths"


def test_every_hookspec_is_documented():
    specs = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("slime_")]
    assert len(specs) >= 25
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert "Called" in doc, f"{spec.__name__}: say when it is called"
        for arg in inspect.signature(spec).parameters:
            assert f":param {arg}:" in doc, f"{spec.__name__}: document :param {arg}:"
        assert ":return:" in doc, f"{spec.__name__}: document the return value"
        assert "Runs in" in doc, f"{spec.__name__}: say which process runs it"


def test_every_registry_kind_has_a_hook():
    from slime_core.plugins import KINDS

    for kind in KINDS:
        assert hasattr(hookspecs, f"slime_register_{kind}")


def test_plugin_validation_errors_are_reported_with_the_others(local_module, options, write_jsonl):
    from slime_core.config import ConfigError, OptionSet, load_config

    body = """
    @hookimpl
    def slime_validate_config(config):
        if config.lr > 1e-3:
            return [f"--lr {config.lr} is too high for this plugin; use at most 1e-3"]
    """
    plugins = Plugins([local_module("plug_check", body)])
    opts = OptionSet()
    plugins.add_options(opts)
    argv = [
        "--prompt-data",
        str(write_jsonl([{"prompt": "x", "label": "y"}])),
        "--hf-checkpoint",
        "m",
        "--rollout-batch-size",
        "1",
        "--lr",
        "0.1",
    ]
    with pytest.raises(ConfigError, match="--lr 0.1 is too high for this plugin"):
        load_config(argv, opts, plugins)
    assert load_config(argv[:-1] + ["1e-4"], opts, plugins).lr == 1e-4


def test_plugins_add_subcommands(local_module, capsys):
    from slime_core.cli.main import main

    body = """
    @hookimpl
    def slime_add_commands(subparsers):
        parser = subparsers.add_parser("hello", help="say hello")
        parser.add_argument("name")
        parser.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)
    """
    local_module("plug_cmd", body)
    assert main(["-p", "plug_cmd", "hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"
