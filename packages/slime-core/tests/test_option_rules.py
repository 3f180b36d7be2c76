"""An option says when it acts (``OptionSet.add(..., acts_when=, no_effect=)``): core warns
about any plugin's option set where it does nothing, and core's config modules rule on none."""

import ast
import re
import textwrap
from pathlib import Path

import pytest

import slime_core.config
from slime_core.cli.run import run_command
from slime_core.config import OptionSet
from slime_core.plugins import Plugins

CONFIG_MODULES = sorted(Path(slime_core.config.__file__).parent.glob("*.py"))
RULE_MODULES = ("no_effect.py", "validate.py")  # these may not even name a plugin's option

SHOUT_PLUGIN = """
from slime_core import hookimpl


@hookimpl
def slime_add_options(options):
    options.add(
        "--shout",
        type=bool,
        default=False,
        help="shout the metrics",
        acts_when=lambda config: config.train_mode == "async",
        no_effect="only asynchronous runs shout (--train-mode async)",
    )
"""


def test_core_config_modules_rule_on_no_plugin_option(options):
    """Each plugin's options (from every installed plugin's `slime_add_options`) are that
    plugin's to check: core's config modules read none of them (as a key or attribute), and
    its no-effect and validation modules do not name one at all."""
    owned = {key: option for key, option in options.options.items() if option.plugin != "core"}
    assert {"fsdp", "megatron", "sglang", "compat"} <= {option.plugin for option in owned.values()}
    problems = []
    for path in CONFIG_MODULES:
        text = path.read_text()
        problems += [
            f"{path.name} reads {key} ({owned[key].plugin}'s)" for key in sorted(_read_keys(text) & owned.keys())
        ]
        if path.name in RULE_MODULES:
            problems += [
                f"{path.name} names {option.flag} ({option.plugin}'s)"
                for option in owned.values()
                if re.search(rf"(?<![\w-])({option.key}|{option.flag})(?![\w-])", text)
            ]
    assert not problems, "move these rules into the plugin that declares the option:\n" + "\n".join(problems)


def _read_keys(source: str) -> set[str]:
    """Every attribute name and every string that could be an option key in ``source``."""
    return {
        node.attr if isinstance(node, ast.Attribute) else node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
    }


@pytest.fixture
def shout_plugin(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "shout_plugin.py").write_text(textwrap.dedent(SHOUT_PLUGIN))
    return Plugins(["shout_plugin"])


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        (["--shout"], True),
        (["--shout", "--train-mode", "async"], False),  # it acts there
        ([], False),  # defaults are never reported
    ],
)
def test_a_plugin_option_is_warned_about_where_its_rule_says_it_has_no_effect(
    shout_plugin, tmp_path, capsys, flags, warned
):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    argv = ["--prompt-data", str(data), "--hf-checkpoint", str(tmp_path), "--rollout-batch-size", "2", "--dry-run"]
    assert run_command([*argv, *flags], shout_plugin) == 0
    warning = "slime run: warning: --shout has no effect here: only asynchronous runs shout (--train-mode async)"
    assert (warning in capsys.readouterr().err.splitlines()) is warned


def test_a_rule_needs_its_reason_and_its_option():
    options = OptionSet()
    with pytest.raises(ValueError, match="give acts_when and no_effect together"):
        options.add("--shout", type=bool, acts_when=lambda config: True)
    with pytest.raises(ValueError, match="no such option is declared"):
        options.add_rule("shout", lambda config: True, "why")
