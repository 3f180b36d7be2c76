"""The test kit's pytest plugin: pytest finds it through its entry point, in any project, and
it stays light and leaves the code under test alone, since it loads in every pytest session of
an environment with slime-core."""

import subprocess
import sys

KIT_FIXTURES = ("ray_cluster", "tiny_model_dir", "rank_pool", "fake_run", "install_plugin")


def test_a_pytest_session_outside_this_repository_offers_the_kits_fixtures(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "slime_core/testing/pytest_plugin.py" in listed.stdout
    assert all(f"\n{name} " in listed.stdout or f"\n{name} [" in listed.stdout for name in KIT_FIXTURES), listed.stdout


def test_the_plugin_imports_nothing_heavy():
    code = (
        "import sys, slime_core.testing.pytest_plugin, slime_core.testing\n"
        "print([m for m in ('torch', 'ray', 'transformers') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_pytest_rewrites_the_asserts_of_the_kit_only():
    import slime_core.loop.weight_check  # (not one of the modules the kit imports as pytest loads it)
    import slime_core.testing.plugins

    def rewritten(module) -> bool:
        return type(module.__loader__).__name__ == "AssertionRewritingHook"

    assert rewritten(slime_core.testing.plugins)  # a failed check in a plugin's tests says what differed
    assert not rewritten(slime_core.loop.weight_check)
