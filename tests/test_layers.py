"""The package's import graph: no cycle, and no import from a lower layer to a higher one.

Read from the source with :mod:`ast` (nothing is imported), every ``import`` counted: at the top of
a module, inside a function (a lazy import that breaks a cycle is still a dependency) or under
``TYPE_CHECKING`` (a dependency of the annotations; left out of the cycle check only, since it never
runs). ``from P import x`` depends on package ``P`` (its ``__init__`` runs and is asked for ``x``) and,
when ``x`` is a submodule, on ``P.x`` too: so a package that re-exports a submodule which imports
the package back is a cycle.

The layers, low to high (:data:`LAYERS`): the transcript format sits below the agents that write it,
the study config above what it configures, ``doctor``/``rehearsal`` above the footprint
estimates they read, the commands above everything but the CLI. ``plan`` is of the commands' layer:
it reads the workflow's ``metrobench`` command lines with the CLI's own parser and settings
(``commands.common.add_run_options``, ``commands.runs.run_config``), so a flag means the same to
both. Modules of one layer may import each
other (the cycle check still holds). Run ``python tests/test_layers.py [ROOT]`` for the report:
every cycle and every upward edge, file and line.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Low to high; a name is a module or package under ``metrobench`` (the package itself is lowest).
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(names.split()) for names in (
    "atomic errors jsonl layout vocabulary retry credentials stack standins",
    "data",
    "hub",
    "kiosk",
    "transcripts",
    "agents",
    "scoring",
    "stats",
    "study",
    "training paper viewer calibration",
    "footprint run_job",
    "doctor publish",
    "rehearsal",
    "commands plan",
    "cli __main__",
))

#: Upward edges known and owed a fix, each with the fix; the test fails when one is added or mended
#: (then delete its line).
PENDING: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    lazy: bool        # inside a function
    typing: bool      # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        how = " (lazy)" if self.lazy else " (TYPE_CHECKING)" if self.typing else ""
        return f"{self.source}:{self.line} -> {self.target}{how}"


def modules(root: Path) -> dict[str, Path]:
    """Every module of ``root/metrobench`` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((root / "metrobench").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def imports(name: str, path: Path, known: dict[str, Path]) -> list[Edge]:
    """The imports of module ``name`` that reach another module of the package."""
    edges: list[Edge] = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def add(target: str, node: ast.stmt, lazy: bool, typing: bool) -> None:
        while target not in known and "." in target:      # ``from m import function``: the module
            target = target.rpartition(".")[0]
        if target in known and target != name:
            edges.append(Edge(name, target, node.lineno, lazy, typing))

    def visit(nodes: list[ast.stmt], lazy: bool, typing: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node, lazy, typing)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                add(source, node, lazy, typing)
                for alias in node.names:
                    if f"{source}.{alias.name}" in known:
                        add(f"{source}.{alias.name}", node, lazy, typing)
            elif isinstance(node, ast.If) and _type_checking(node):
                visit(node.body, lazy, True)
                visit(node.orelse, lazy, typing)
            else:
                inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for field in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        visit([c for c in children if isinstance(c, (ast.stmt, ast.ExceptHandler))], inner, typing)
                for case in getattr(node, "cases", []) or []:
                    visit(case.body, inner, typing)

    visit(ast.parse(path.read_text(encoding="utf-8")).body, False, False)
    return edges


def graph(root: Path = ROOT) -> list[Edge]:
    known = modules(root)
    return [edge for name, path in known.items() for edge in imports(name, path, known)]


def layer(module: str) -> int:
    """The layer of ``metrobench.X...`` by ``X`` (KeyError: a module no layer names: add it)."""
    if module == "metrobench":
        return 0
    top = module.split(".")[1]
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise KeyError(f"{module}: in no layer of tests/test_layers.py LAYERS")


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), runtime imports only."""
    succ: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.typing:
            succ.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(succ):
        if v not in index:
            strong(v)
    return groups


def upward(edges: list[Edge]) -> list[Edge]:
    return [edge for edge in edges if layer(edge.target) > layer(edge.source)]


def test_every_module_has_a_layer():
    assert [m for m in modules(ROOT) if _layer_or_none(m) is None] == []


def _layer_or_none(module: str) -> int | None:
    try:
        return layer(module)
    except KeyError:
        return None


def test_no_import_cycle():
    edges = graph()
    found = cycles(edges)
    assert found == [], "\n".join(
        " <-> ".join(group) + "".join(f"\n  {e}" for e in edges if e.source in group and e.target in group
                                      and not e.typing) for group in found)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    found = upward(graph())
    new = [str(e) for e in found if (e.source, e.target) not in PENDING]
    assert new == [], "upward imports (move the name to the layer it belongs in):\n" + "\n".join(new)
    assert {(e.source, e.target) for e in found} == PENDING, "a PENDING edge is gone: delete its line"


def test_the_checker_sees_lazy_typing_and_package_imports(tmp_path):
    """A lazy upward import, a TYPE_CHECKING one and a package <-> submodule cycle are all found."""
    pkg = tmp_path / "metrobench"
    (pkg / "viewer").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data.py").write_text("def f():\n    from metrobench.viewer.site import g\n")
    (pkg / "kiosk.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from metrobench.commands import Subparsers\n")
    (pkg / "commands.py").write_text("")
    (pkg / "viewer" / "__init__.py").write_text("from metrobench.viewer.site import g\n")
    (pkg / "viewer" / "site.py").write_text("from metrobench.viewer import pages\ndef g(): pass\n")
    (pkg / "viewer" / "pages.py").write_text("from .site import g\n")
    edges = graph(tmp_path)
    assert [str(e) for e in upward(edges)] == [
        "metrobench.data:2 -> metrobench.viewer.site (lazy)",
        "metrobench.kiosk:3 -> metrobench.commands (TYPE_CHECKING)",
    ]
    assert cycles(edges) == [["metrobench.viewer", "metrobench.viewer.pages", "metrobench.viewer.site"]]


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    edges = graph(root)
    found = cycles(edges)
    print(f"{len(found)} import cycles")
    for group in found:
        print("  " + " <-> ".join(group))
        for edge in edges:
            if edge.source in group and edge.target in group and not edge.typing:
                print(f"    {edge}")
    up = upward(edges)
    print(f"{len(up)} upward imports ({len({(e.source, e.target) for e in up})} module pairs)")
    for edge in up:
        print(f"  {edge}")
