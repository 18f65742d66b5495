"""Scripts outside the package import names that still exist.

``benchmarks/``, ``scripts/`` and the kit run only by hand or on a GPU, so no other test imports
them: a renamed function broke ``benchmarks/tools_throughput.py`` for a while without a test noticing.
This reads every ``from metrobench... import name`` in them (without running the script) and checks
that the module has the name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "scripts") for p in (REPO / folder).rglob("*.py"))


def project_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) for each name a file imports from the metrobench package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "metrobench":
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def test_the_scripts_are_found_and_some_import_the_project():
    names = {p.relative_to(REPO).as_posix() for p in SCRIPTS}
    assert {"benchmarks/tools_throughput.py", "scripts/gpu-kit/serve.py", "scripts/gpu-kit/next_half.py"} <= names
    assert sum(bool(project_imports(p)) for p in SCRIPTS) >= 5


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_name_a_script_imports_from_the_project_exists(path):
    missing = [f"{path.relative_to(REPO)}:{line}: {module} has no {name}"
               for line, module, name in project_imports(path)
               if not hasattr(importlib.import_module(module), name)
               and importlib.util.find_spec(f"{module}.{name}") is None]
    assert not missing, "\n".join(missing)
