"""Which slime package may import which: the core imports no plugin package, the router no
rollout backend, the two train backends not each other, and slime-compat only the core and the
rewards. Every import counts, lazy ones inside functions included, since a lazy import is still
a dependency the moment it runs."""

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[1] / "packages"
#: distribution -> the top-level modules it ships (slime-compat: its own, and slime's namespace)
MODULES = {
    "slime-core": {"slime_core"},
    "slime-fsdp": {"slime_fsdp"},
    "slime-megatron": {"slime_megatron"},
    "slime-sglang": {"slime_sglang"},
    "slime-vllm": {"slime_vllm"},
    "slime-rewards": {"slime_rewards"},
    "slime-router": {"slime_router"},
    "slime-compat": {"slime_compat", "slime"},
}
SLIME_PACKAGES = set().union(*MODULES.values())
#: distribution -> the other distributions' modules it may import
ALLOWED = {
    "slime-core": set(),
    "slime-router": {"slime_core"},
    "slime-sglang": {"slime_core"},
    "slime-vllm": {"slime_core"},
    "slime-rewards": {"slime_core"},
    "slime-fsdp": {"slime_core"},
    "slime-megatron": {"slime_core"},
    # slime's API on top of the core; rm_hub's DAPO grader is slime-rewards' (its `rewards` extra)
    "slime-compat": {"slime_core", "slime_rewards"},
}


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """(top-level module, line) of every absolute import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def test_every_package_is_checked():
    assert sorted(path.name for path in PACKAGES.iterdir() if (path / "pyproject.toml").exists()) == sorted(MODULES)
    for package, modules in MODULES.items():
        assert {path.name for path in (PACKAGES / package / "src").iterdir() if path.is_dir()} - {
            "__pycache__"
        } == modules


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_slime_packages_it_may(package):
    forbidden = [
        f"{path.relative_to(PACKAGES)}:{line} imports {module}"
        for own in sorted(MODULES[package])
        for path in sorted((PACKAGES / package / "src" / own).rglob("*.py"))
        for module, line in imported_packages(path)
        if module in SLIME_PACKAGES - MODULES[package] - ALLOWED[package]
    ]
    assert not forbidden, (
        f"{package} may import only {sorted(ALLOWED[package]) or 'no other slime package'}; "
        "reach the others through slime_core's contracts and registries:\n" + "\n".join(forbidden)
    )


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from slime_sglang.client import EngineClient\n    import slime_router.launch\n")
    assert imported_packages(module) == [("slime_sglang", 2), ("slime_router", 3)]
