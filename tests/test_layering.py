"""The package dependency direction of docs/architecture.md, checked on the AST.

Every import of our own modules counts (module level, inside functions,
``importlib.import_module`` with a literal name), except those under ``if
TYPE_CHECKING:``, which never run. The rooms are the four folders, with the
engine's public surface (what scenarios and reward files may import) as a
room of its own. Checked here:

- the arrows between rooms are exactly those docs/architecture.md draws;
- store/ imports neither engine, tui nor textual; engine/ imports neither
  tui nor textual; scenarios/ reach the engine only through its public
  surface;
- no import cycle between modules, so no cycle between packages either;
- the public surface loads without torch, openai or any module of the store.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("engine", "store", "tui", "scenarios")
#: What scenarios and user reward files may import from the engine.
PUBLIC_SURFACE = ("rlab.engine.types", "rlab.engine.paths", "rlab.engine.rewards.helpers", "rlab.engine.validation")
FORBIDDEN = {
    "store": {"engine", "tui", "textual", "textual_plotext"},
    "engine": {"tui", "textual", "textual_plotext"},
    "scenarios": {"tui", "textual", "textual_plotext"},
}


def module_name(path: Path) -> str:
    """``engine/rewards/rubric.py`` -> ``rlab.engine.rewards.rubric`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return "rlab." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    """Every module of the four folders, by its ``rlab.`` name."""
    return {module_name(p): p for top in TOP_LEVEL for p in (ROOT / top).rglob("*.py")}


def imported_names(source: str, package: str, modules: Collection[str] = ()) -> set[str]:
    """Dotted names a source imports at run time.

    ``from a import b`` gives ``a.b`` when that is one of ``modules`` (a
    submodule), else ``a`` (an attribute of ``a``); with no ``modules``
    given, both. Relative imports resolve against ``package``; imports under
    ``if TYPE_CHECKING:`` are left out.
    """
    tree = ast.parse(source)
    type_only = {id(n) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for n in ast.walk(node)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                names.update([submodule] if submodule in modules else [base] if modules else [base, submodule])
        elif _dynamic_import(node):
            names.add(node.args[0].value)
    return names


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _dynamic_import(node: ast.AST) -> bool:
    """``importlib.import_module("x")`` or ``__import__("x")`` with a literal name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    name = getattr(node.func, "attr", getattr(node.func, "id", ""))
    first = node.args[0]
    return (name in ("import_module", "__import__") and isinstance(first, ast.Constant)
            and isinstance(first.value, str))


def imports_of(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Our modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return {n for n in imported_names(path.read_text(encoding="utf-8"), package, modules) if n in modules} - {name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports."""
    modules = our_modules()
    return {name: imports_of(path, name, modules) for name, path in modules.items()}


def room(module: str) -> str:
    """The room a module belongs to: its top-level folder, or ``engine.public``."""
    return "engine.public" if module in PUBLIC_SURFACE else module.split(".")[1]


def room_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(from, to) for every pair of rooms with an import between them."""
    return {(room(a), room(b)) for a, targets in graph.items() for b in targets if room(a) != room(b)}


def documented_arrows(text: str) -> set[tuple[str, str]]:
    """The arrows of architecture.md's block that starts with the ``rooms:`` line:
    ``A -> B, C`` lines, ``-> nothing`` for a room that imports no other."""
    block = text.split("rooms:", 1)[1].split("\n\n", 1)[0]
    arrows = set()
    for line in block.splitlines():
        match = re.match(r"\s*([\w.]+)\s+->\s+(.+)", line)
        if match and match[2].strip() != "nothing":
            arrows.update((match[1], target.strip()) for target in match[2].split(","))
    return arrows


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), i.e. the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def violations(package: str, files: dict[str, str]) -> list[str]:
    """``"path imports name"`` for each forbidden import in ``files`` (path -> source)."""
    out = []
    for path, source in sorted(files.items()):
        names = imported_names(source, f"rlab.{package}")
        roots = {n.split(".")[1] if n.startswith("rlab.") and n.count(".") else n.split(".")[0] for n in names}
        out.extend(f"{path} imports {name}" for name in sorted(roots & FORBIDDEN[package]))
        if package == "scenarios":
            out.extend(f"{path} imports {n}, not the engine's public surface" for n in sorted(names)
                       if n.startswith("rlab.engine.") and not n.startswith(PUBLIC_SURFACE))
    return out


def test_the_rooms_import_each_other_exactly_as_architecture_md_draws():
    documented = documented_arrows((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert documented, "docs/architecture.md lost its 'rooms:' block of arrows"
    assert room_arrows(import_graph()) == documented


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_direction(package):
    files = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / package).rglob("*.py")}
    assert files, f"no Python files under {package}/"
    assert violations(package, files) == []


def test_no_import_cycle_between_our_modules():
    assert cycles(import_graph()) == []


def test_the_public_surface_loads_without_the_store_or_the_heavy_parts():
    """What scenarios import loads neither torch nor any module of the store (its SQLite code, its records)."""
    heavy = ("torch", "openai", "transformers", "sqlite_utils", "rlab.engine.run.config", "rlab.engine.run.session")
    code = ("import sys; import " + ", ".join(PUBLIC_SURFACE) + "; "
            f"print(sorted(m for m in sys.modules if m in {heavy!r} or m.startswith('rlab.store')))")
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_public_surface_imports_no_module_of_the_store():
    graph = import_graph()
    reached = {n for module in PUBLIC_SURFACE for n in graph[module]}
    assert not {n for n in reached if n.startswith("rlab.store")}, reached


@pytest.mark.parametrize("package, source", [
    ("store", "from rlab.engine.train.advantages import grpo\n"),
    ("store", "import rlab.tui.app\n"),
    ("store", "def f():\n    from textual.app import App\n"),
    ("engine", "import textual_plotext\n"),
    ("engine", "import importlib\nimportlib.import_module('rlab.tui.cli')\n"),
    ("scenarios", "from rlab.engine.rewards.rubric import load_rubric\n"),
    ("scenarios", "def f():\n    from rlab.engine.run.session import start\n"),
])
def test_checker_catches_violations(package, source):
    assert violations(package, {"bad.py": source}) != []


def test_checker_allows_legal_imports():
    assert violations("engine", {"ok.py": "import rlab.store.writer\nfrom . import advantages\n"}) == []
    assert violations("store", {"ok.py": "import sqlite_utils\nfrom rlab.store.db import open_db\n"}) == []
    assert violations("scenarios", {"ok.py": "from rlab.engine.rewards.helpers import env_reward\n"
                                             "from rlab.engine.types import Example\n"}) == []
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rlab.tui.app\n"
    assert violations("engine", {"ok.py": typing_only}) == []


def test_cycle_finder_finds_a_cycle_and_the_arrow_reader_reads_arrows():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    text = "rooms:\n    tui -> engine, store\n    store -> nothing\n\nmore"
    assert documented_arrows(text) == {("tui", "engine"), ("tui", "store")}
