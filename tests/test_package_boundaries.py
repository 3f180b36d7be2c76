"""Which slime package may import which: the core imports no plugin package, the router no
rollout backend, and the two train backends not each other. Every import counts, lazy ones
inside functions included, since a lazy import is still a dependency the moment it runs."""

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[1] / "packages"
SLIME_PACKAGES = {"slime_core", "slime_fsdp", "slime_megatron", "slime_sglang", "slime_rewards", "slime_router"}
#: package -> the other slime packages it may import
ALLOWED = {
    "slime_core": set(),
    "slime_router": {"slime_core"},
    "slime_sglang": {"slime_core"},
    "slime_rewards": {"slime_core"},
    "slime_fsdp": {"slime_core"},
    "slime_megatron": {"slime_core"},
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


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_slime_packages_it_may(package):
    source = PACKAGES / package.replace("_", "-") / "src" / package
    forbidden = [
        f"{path.relative_to(PACKAGES)}:{line} imports {module}"
        for path in sorted(source.rglob("*.py"))
        for module, line in imported_packages(path)
        if module in SLIME_PACKAGES - {package} - ALLOWED[package]
    ]
    assert not forbidden, (
        f"{package} may import only {sorted(ALLOWED[package]) or 'no other slime package'}; "
        "reach the others through slime_core's contracts and registries:\n" + "\n".join(forbidden)
    )


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from slime_sglang.client import EngineClient\n    import slime_router.launch\n")
    assert imported_packages(module) == [("slime_sglang", 2), ("slime_router", 3)]
