"""Hooks are called through pluggy: wrappers, tryfirst/trylast and firstresult work."""

import textwrap

import pluggy
import pytest

from slime_core import hookimpl
from slime_core.config import OptionSet
from slime_core.plugins import PluginError, Plugins

hookspec = pluggy.HookspecMarker("slime")


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """Write a plugin module to a temporary folder on sys.path; return a writer (as
    test_plugins.py's ``local_module``)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name, body):
        (tmp_path / f"{name}.py").write_text("from slime_core import hookimpl\n" + textwrap.dedent(body))
        return name

    return write


def plain(label, opts=""):
    """A plugin whose slime_after_rollout logs ``label`` to ``metrics["order"]``."""
    return f"""
    @hookimpl({opts})
    def slime_after_rollout(rollout_id, groups, metrics):
        metrics["order"].append("{label}")
    """


def wrapper(label, opts="wrapper=True"):
    """A plugin whose slime_after_rollout wrapper logs ``label`` before and after the others."""
    return f"""
    @hookimpl({opts})
    def slime_after_rollout(rollout_id, groups, metrics):
        metrics["order"].append("{label}:before")
        result = yield
        metrics["order"].append("{label}:after")
        return result
    """


def after_rollout(plugins):
    metrics = {"order": []}
    plugins.after_rollout(0, [], metrics)
    return metrics


def test_wrappers_run_around_plain_implementations_and_see_the_metrics(plugin_module):
    plain_body = """
    @hookimpl
    def slime_after_rollout(rollout_id, groups, metrics):
        metrics["order"].append("plain")
        metrics["plain_saw_wrapper"] = metrics.get("wrapped", False)
    """
    new_style = """
    @hookimpl(wrapper=True)
    def slime_after_rollout(rollout_id, groups, metrics):
        metrics["order"].append("new:before")
        metrics["wrapped"] = True
        result = yield
        metrics["order"].append("new:after")
        metrics["new_saw_plain"] = "plain" in metrics["order"]
        return result
    """
    old_style = """
    @hookimpl(hookwrapper=True)
    def slime_after_rollout(rollout_id, groups, metrics):
        metrics["order"].append("old:before")
        outcome = yield
        metrics["order"].append("old:after")
        metrics["old_result"] = outcome.get_result()
    """
    names = [plugin_module("disp_plain", plain_body), plugin_module("disp_old", old_style)]
    names.append(plugin_module("disp_new", new_style))
    metrics = after_rollout(Plugins(names, autoload=False))
    assert metrics["order"] == ["new:before", "old:before", "plain", "old:after", "new:after"]
    assert metrics["plain_saw_wrapper"] and metrics["new_saw_plain"]
    assert metrics["old_result"] == []


def test_tryfirst_and_trylast_order_implementations_and_wrappers(plugin_module):
    names = [
        plugin_module("disp_first", plain("first", "tryfirst=True")),
        plugin_module("disp_outer", wrapper("outer", "wrapper=True, tryfirst=True")),
        plugin_module("disp_mid", plain("mid")),
        plugin_module("disp_inner", wrapper("inner", "wrapper=True, trylast=True")),
        plugin_module("disp_last", plain("last", "trylast=True")),
    ]
    metrics = after_rollout(Plugins(names, autoload=False))
    assert metrics["order"] == ["outer:before", "inner:before", "first", "mid", "last", "inner:after", "outer:after"]


class PickSpec:
    """A test-only hook whose spec asks for the first non-None result."""

    @hookspec(firstresult=True)
    def slime_test_pick(self, calls):
        """Called by the test; each implementation logs its name to ``calls``."""


def test_firstresult_specs_stop_at_the_first_result(plugin_module):
    def picker(label, answer):
        return f"""
        @hookimpl
        def slime_test_pick(calls):
            calls.append("{label}")
            return {answer!r}
        """

    plugins = Plugins(autoload=False)
    plugins._pm.add_hookspecs(PickSpec)
    for label, answer in [("late", "late answer"), ("first", "first answer"), ("silent", None)]:
        plugins.load_module(plugin_module(f"disp_pick_{label}", picker(label, answer)))
    calls = []
    assert plugins._call("slime_test_pick", calls=calls) == "first answer"
    assert calls == ["silent", "first"]


def test_a_failing_implementation_inside_a_wrapper_names_its_plugin(plugin_module):
    failing = """
    @hookimpl
    def slime_after_rollout(rollout_id, groups, metrics):
        look_up(metrics)

    def look_up(metrics):
        return metrics["missing"]
    """
    guard = """
    @hookimpl(wrapper=True)
    def slime_after_rollout(rollout_id, groups, metrics):
        try:
            return (yield)
        except KeyError:
            metrics["guard_saw"] = "KeyError"
            raise
    """
    plugins = Plugins([plugin_module("disp_fails", failing), plugin_module("disp_guard", guard)], autoload=False)
    metrics = {}
    expected = r"plugin 'disp_fails' \(local module\) failed in slime_after_rollout: KeyError"
    with pytest.raises(PluginError, match=expected) as info:
        plugins.after_rollout(0, [], metrics)
    assert isinstance(info.value.__cause__, KeyError)
    assert metrics["guard_saw"] == "KeyError"


def test_a_failing_wrapper_names_its_own_plugin(plugin_module):
    failing_wrapper = """
    @hookimpl(wrapper=True)
    def slime_after_rollout(rollout_id, groups, metrics):
        yield
        raise ValueError("teardown broke")
    """
    names = [plugin_module("disp_fine", plain("fine")), plugin_module("disp_bad_wrapper", failing_wrapper)]
    expected = r"plugin 'disp_bad_wrapper' \(local module\) failed in slime_after_rollout: ValueError: teardown broke"
    with pytest.raises(PluginError, match=expected):
        after_rollout(Plugins(names, autoload=False))


def test_failures_are_told_apart_when_plugins_share_code(plugin_module):
    twin = """
    @hookimpl
    def slime_before_eval(rollout_id):
        if __name__ == "disp_twin_b":
            raise KeyError("b")
    """
    plugins = Plugins([plugin_module("disp_twin_a", twin), plugin_module("disp_twin_b", twin)], autoload=False)
    with pytest.raises(PluginError, match="plugin 'disp_twin_b'"):
        plugins.before_eval(0)

    class Counter:
        def __init__(self, fails):
            self.fails = fails

        @hookimpl
        def slime_before_eval(self, rollout_id):
            if self.fails:
                raise KeyError("counter")

    plugins = Plugins(autoload=False)
    plugins.register_object("disp_counter_fine", Counter(False))
    plugins.register_object("disp_counter_fails", Counter(True))
    with pytest.raises(PluginError, match="plugin 'disp_counter_fails'"):
        plugins.before_eval(0)


def test_trace_names_the_wrappers_and_implementations_a_call_runs(plugin_module, monkeypatch, capsys):
    monkeypatch.setenv("SLIME_TRACE_HOOKS", "1")
    names = [plugin_module("disp_traced", plain("traced")), plugin_module("disp_traced_wrapper", wrapper("w"))]
    after_rollout(Plugins(names, autoload=False))
    lines = [line for line in capsys.readouterr().err.splitlines() if "slime_after_rollout" in line]
    assert lines == [
        "slime hook: slime_after_rollout -> plugin 'disp_traced_wrapper' (wrapper)",
        "slime hook: slime_after_rollout -> plugin 'disp_traced'",
    ]


def test_a_wrapper_can_change_a_hook_result(plugin_module):
    body = """
    @hookimpl
    def slime_validate_config(config):
        return ["plain error"]

    @hookimpl(wrapper=True, specname="slime_validate_config")
    def add_an_error(config):
        errors = yield
        return errors + [["added by the wrapper"]]
    """
    plugins = Plugins([plugin_module("disp_validate", body)], autoload=False)
    assert plugins.validate_config(None) == ["plain error", "added by the wrapper"]


def test_registration_wrappers_run_and_entries_name_their_plugin(plugin_module):
    wrapping = """
    @hookimpl(wrapper=True, specname="slime_register_reward_functions")
    def around(register):
        register("before_own", len)
        yield
        register("after_own", len)
    """
    registering = """
    @hookimpl
    def slime_register_reward_functions(register):
        register("plain_one", len)
    """
    names = [plugin_module("disp_reg_plain", registering), plugin_module("disp_reg_wrapper", wrapping)]
    registry = Plugins(names, autoload=False).registry("reward_functions")
    owners = {name: registry.entry(name).plugin for name in registry.names()}
    assert owners == {"plain_one": "disp_reg_plain", "before_own": "disp_reg_wrapper", "after_own": "disp_reg_wrapper"}


def test_options_declared_in_a_wrapper_are_tagged_with_its_plugin(plugin_module):
    body = """
    @hookimpl
    def slime_add_options(options):
        options.add("--disp-flag", type=int, default=1)

    @hookimpl(wrapper=True, specname="slime_add_options")
    def around(options):
        yield
        options.add("--disp-extra", type=int, default=options["disp_flag"].default + 1)
    """
    options = OptionSet()
    Plugins([plugin_module("disp_options", body)], autoload=False).add_options(options)
    assert (options["disp_flag"].plugin, options["disp_extra"].plugin) == ("disp_options", "disp_options")
    assert options["disp_extra"].default == 2
    assert options["lr"].plugin == "core" and options.current_plugin is None
