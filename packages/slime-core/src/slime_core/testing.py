"""Checks for plugin authors' test suites (slime's own packages use them too)."""

from __future__ import annotations

import subprocess
import sys

HEAVY_MODULES = ("torch", "ray", "transformers", "megatron", "sglang")


def check_plugin_installed(name: str, distribution: str) -> dict:
    """Assert that plugin ``name`` is found through the ``slime`` entry-point group, comes
    from ``distribution``, and that importing it (as ``slime --help`` does) stays light.

    Returns the plugin's entry in ``slime plugins``' description.
    """
    from slime_core.plugins import Plugins

    described = {plugin["name"]: plugin for plugin in Plugins().describe()}
    assert name in described, f"plugin '{name}' not found through the slime entry points; installed: {sorted(described)}"
    assert described[name]["distribution"] == distribution, described[name]
    module = Plugins().info[name].module.__name__
    code = f"import sys, {module}; print([m for m in {HEAVY_MODULES!r} if m in sys.modules])"
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == "[]", f"importing {module} imports heavy modules: {heavy}"
    return described[name]
