"""A plugin distribution as its users get it: installed from its source folder, found through
the ``slime`` entry-point group, and light to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY_MODULES = ("torch", "ray", "transformers", "megatron", "sglang")


def check_plugin_installed(name: str, distribution: str) -> dict:
    """Assert that plugin ``name`` is found through the ``slime`` entry-point group, comes
    from ``distribution``, and that importing it (as ``slime --help`` does) stays light.

    Returns the plugin's entry in ``slime plugins``' description.
    """
    from slime_core.plugins import Plugins

    described = {plugin["name"]: plugin for plugin in Plugins().describe()}
    assert name in described, (
        f"plugin '{name}' not found through the slime entry points; installed: {sorted(described)}"
    )
    assert described[name]["distribution"] == distribution, described[name]
    module = Plugins().info[name].module.__name__
    code = f"import sys, {module}; print([m for m in {HEAVY_MODULES!r} if m in sys.modules])"
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == "[]", f"importing {module} imports heavy modules: {heavy}"
    return described[name]


class PluginSites:
    """Plugin distributions installed from their source folders with pip (no dependencies, no
    build isolation: the build backend comes from this environment), each into a folder of its
    own under ``root``, once: a folder on ``sys.path`` makes its entry points visible."""

    def __init__(self, root: Path):
        self.root, self.sites = Path(root), {}

    def site(self, source: str | Path) -> Path:
        """The folder the distribution at ``source`` (its pyproject.toml's folder) is installed in."""
        source = Path(source).resolve()
        if source not in self.sites:
            target = self.root / f"site{len(self.sites)}"
            command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
            done = subprocess.run(
                [*command, "--target", str(target), str(source)], capture_output=True, text=True, timeout=300
            )
            if done.returncode:
                raise RuntimeError(
                    f"pip could not install the plugin at {source} (is pyproject.toml there, and its build backend "
                    f"installed in this environment?):\n{done.stderr[-2000:]}"
                )
            self.sites[source] = target
        return self.sites[source]
