"""Each package declares exactly the third-party distributions its source files import.

For every package under packages/, the imports of its src/ files (lazy ones inside functions
included; relative imports and ``if TYPE_CHECKING:`` blocks left out) are mapped to the
distributions that provide them and compared with its pyproject.toml: ``[project].dependencies``
and every optional-dependencies extra but ``test`` (source code must not rely on test tools).
An import nothing declares works in the development venv, where everything is installed, but
breaks a plain ``pip install`` of that one package; a declared dependency nothing imports is
weight every install carries. Files are parsed, never imported, so the test takes a second.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(path for path in (ROOT / "packages").iterdir() if (path / "pyproject.toml").is_file())

#: The package the others build on: it must never depend on them.
CORE = "slime-core"

#: Extras that only tests use; an import under src/ must not rely on them.
TEST_EXTRAS = {"test"}

#: Declared on purpose although no file under src/ imports them (PEP 503 names, per package).
USED_WITHOUT_IMPORT = {
    "slime-megatron": {
        "psutil",  # megatron-core's torch_dist checkpoint writer needs it but does not declare it.
    },
    "slime-rewards": {
        # Pins the latex2sympy2_extended release it is validated with, and is what
        # benchmarks/math_grader.py compares the grader against.
        "math-verify",
    },
    "slime-router": {
        "sglang-router",  # Runs as a subprocess: `python -m sglang_router.launch_router`.
    },
    "slime-sglang": {
        "sglang",  # The `server` extra runs it as a subprocess: `python -m sglang.launch_server`.
    },
}


def normalise(name: str) -> str:
    """A distribution name in PEP 503 form, so ``PyYAML`` and ``pyyaml``, or ``latex2sympy2_extended``
    and ``latex2sympy2-extended``, compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pyproject(package: Path) -> dict:
    """The parsed pyproject.toml of ``package``."""
    return tomllib.loads((package / "pyproject.toml").read_text())


def shipped_modules(package: Path) -> list[str]:
    """The top-level modules ``package`` ships: the folders under its src/ (regular packages,
    and namespace packages such as slime-compat's ``slime``)."""
    return sorted(
        path.name
        for path in (package / "src").iterdir()
        if path.is_dir() and path.name.isidentifier() and any(path.rglob("*.py"))
    )


@cache
def module_distributions() -> dict[str, list[str]]:
    """Top-level module -> the distributions providing it: what is installed in this
    environment, plus the workspace packages (editable installs are not listed there)."""
    workspace = {
        module: [read_pyproject(package)["project"]["name"]]
        for package in PACKAGES
        for module in shipped_modules(package)
    }
    return {**packages_distributions(), **workspace}


def is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` condition is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_statements(nodes):
    """Every import statement in ``nodes`` at any depth (function bodies too), leaving out the
    body of ``if TYPE_CHECKING:``, which only type checkers run."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            yield from import_statements(node.orelse)
        else:
            yield from import_statements(ast.iter_child_nodes(node))


def top_level_modules(statement: ast.Import | ast.ImportFrom) -> list[str]:
    """The top-level modules an import statement loads; none for a relative import."""
    if isinstance(statement, ast.Import):
        return [alias.name.split(".")[0] for alias in statement.names]
    return [statement.module.split(".")[0]] if statement.level == 0 else []


def third_party_imports(package: Path) -> dict[str, list[str]]:
    """Module -> the places (``file:line``) under src/ that import it, for every module that
    is neither in the standard library nor shipped by ``package`` itself."""
    own = shipped_modules(package)
    places: dict[str, list[str]] = {}
    for path in sorted((package / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for statement in import_statements([tree]):
            for module in top_level_modules(statement):
                if module not in sys.stdlib_module_names and module not in own:
                    places.setdefault(module, []).append(f"{path.relative_to(ROOT)}:{statement.lineno}")
    return places


def declared_dependencies(package: Path) -> dict[str, str]:
    """Normalised name -> where it is declared, for ``[project].dependencies`` and every extra
    but the test ones."""
    project = read_pyproject(package)["project"]
    sections = {"[project].dependencies": project.get("dependencies", [])}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra not in TEST_EXTRAS:
            sections[f"extra {extra!r}"] = requirements
    return {
        normalise(Requirement(text).name): section
        for section, requirements in sections.items()
        for text in requirements
    }


def distributions_of(module: str) -> list[str]:
    """The distributions providing ``module``; for one not installed here, the guess that
    its distribution has its name."""
    return module_distributions().get(module, [module])


def how_to_declare(package: Path, distribution: str) -> str:
    """The fix for an undeclared import of ``distribution`` by ``package``."""
    workspace = {read_pyproject(other)["project"]["name"] for other in PACKAGES}
    if package.name == CORE and distribution in workspace:
        return (
            f"{CORE} must never depend on {distribution}: move this code into {distribution} "
            f"(or let {distribution} provide it through a hook)"
        )
    return (
        f"add {distribution!r} to [project].dependencies (or to the extra of the optional "
        "feature that imports it), with a comment saying why"
    )


def undeclared_imports(package: Path, declared: dict[str, str]) -> list[str]:
    """One line per imported module whose distribution ``package`` does not declare."""
    problems = []
    for module, places in sorted(third_party_imports(package).items()):
        candidates = distributions_of(module)
        if not any(normalise(name) in declared for name in candidates):
            more = f" (and {len(places) - 1} more)" if len(places) > 1 else ""
            problems.append(f"    {module}, imported at {places[0]}{more}: {how_to_declare(package, candidates[0])}")
    return problems


def unused_declarations(package: Path, declared: dict[str, str]) -> list[str]:
    """One line per declared dependency that no file under src/ imports and that is not in
    ``USED_WITHOUT_IMPORT``."""
    imported = {normalise(name) for module in third_party_imports(package) for name in distributions_of(module)}
    deliberate = USED_WITHOUT_IMPORT.get(package.name, set())
    return [
        f"    {name} ({section}): remove it, or add it to USED_WITHOUT_IMPORT in {Path(__file__).name} "
        "with the reason it is needed without an import"
        for name, section in sorted(declared.items())
        if name not in imported | deliberate
    ]


def test_imports_counted_are_absolute_and_run_time():
    """Lazy imports inside functions count; relative ones and ``if TYPE_CHECKING:`` do not."""
    source = """
from . import sibling
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import typed_only
else:
    import runtime_fallback
def load():
    import lazy.sub
    from lazy_from.sub import thing
"""
    found = [module for statement in import_statements([ast.parse(source)]) for module in top_level_modules(statement)]
    assert found == ["typing", "runtime_fallback", "lazy", "lazy_from"]


@pytest.mark.parametrize("package", PACKAGES, ids=[package.name for package in PACKAGES])
def test_declared_dependencies_match_imports(package):
    declared = declared_dependencies(package)
    sections = {
        "imported but not declared": undeclared_imports(package, declared),
        "declared but imported by no file under src/": unused_declarations(package, declared),
    }
    report = [f"  {title}:\n" + "\n".join(lines) for title, lines in sections.items() if lines]
    if report:
        pyproject = (package / "pyproject.toml").relative_to(ROOT)
        pytest.fail(f"{pyproject} does not match its imports\n" + "\n".join(report), pytrace=False)
