"""``slime run`` in this process on the fake backends (`slime_core.testing.fakes`): the real
driver, its config checks and plugin loading, with no Ray and no model, in seconds."""

from __future__ import annotations

import json
from pathlib import Path

#: The flags that select the fakes; a test's own flags come after them and win.
FAKE_FLAGS = (
    "--actor-runtime",
    "inprocess",
    "--train-backend",
    "fake",
    "--rollout-backend",
    "fake",
    "--router",
    "fake",
)


def run_on_fakes(argv, hooks=(), modules=()) -> int:
    """``slime run FAKE_FLAGS *argv`` in this process, with the installed plugins, the local
    plugin ``modules`` (as ``slime -p module`` loads them), and the fake backends and ``hooks``
    (objects or modules with ``@hookimpl`` functions) registered for this run only; its exit
    code. `Recorder` is reset first: afterwards it holds what this run asked of the fakes."""
    from slime_core.cli.run import run_command
    from slime_core.plugins import Plugins
    from slime_core.testing.fakes import FakeBackendsPlugin, Recorder

    Recorder.reset()
    plugins = Plugins(modules)
    extra = {"fake_backends": FakeBackendsPlugin, **{f"driver_test_hooks_{i}": hook for i, hook in enumerate(hooks)}}
    for name, plugin in extra.items():
        plugins.register_object(name, plugin)
    try:
        return run_command([*FAKE_FLAGS, *map(str, argv)], plugins)
    finally:
        for name in extra:
            plugins.unregister(name)


def write_addition_prompts(path: Path) -> Path:
    """The 100 addition prompts ``"a+b="`` (a, b < 10) labelled with their sums, as JSONL at ``path``."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    path.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a, b in pairs))
    return path
