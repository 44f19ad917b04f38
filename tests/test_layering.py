"""The package dependency direction of docs/interfaces.md, checked on the AST.

store/ imports neither engine, tui nor textual; engine/ imports neither tui
nor textual (nor textual_plotext).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "store": {"engine", "tui", "textual", "textual_plotext"},
    "engine": {"tui", "textual", "textual_plotext"},
}


def imported_roots(source: str, package: str) -> set[str]:
    """Top-level names of the modules a source file imports.

    Relative imports resolve against ``package`` (they stay inside it).
    """
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            roots.add(package if node.level else node.module.split(".")[0])
        elif _dynamic_import(node):
            roots.add(node.args[0].value.split(".")[0])
    return roots


def _dynamic_import(node: ast.AST) -> bool:
    """``importlib.import_module("x")`` or ``__import__("x")`` with a literal name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    name = getattr(node.func, "attr", getattr(node.func, "id", ""))
    first = node.args[0]
    return (name in ("import_module", "__import__") and isinstance(first, ast.Constant)
            and isinstance(first.value, str))


def violations(package: str, files: dict[str, str]) -> list[str]:
    """``"path imports name"`` for each forbidden import in ``files`` (path -> source)."""
    return [f"{path} imports {name}"
            for path, source in sorted(files.items())
            for name in sorted(imported_roots(source, package) & FORBIDDEN[package])]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_direction(package):
    files = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for p in (ROOT / package).rglob("*.py")}
    assert files, f"no Python files under {package}/"
    assert violations(package, files) == []


@pytest.mark.parametrize("package, source", [
    ("store", "from engine.advantages import grpo\n"),
    ("store", "import tui.app\n"),
    ("store", "def f():\n    from textual.app import App\n"),
    ("engine", "import textual_plotext\n"),
    ("engine", "import importlib\nimportlib.import_module('tui.cli')\n"),
])
def test_checker_catches_violations(package, source):
    assert violations(package, {"bad.py": source}) != []


def test_checker_allows_legal_imports():
    assert violations("engine", {"ok.py": "import store.writer\nfrom . import advantages\n"}) == []
    assert violations("store", {"ok.py": "import sqlite_utils\nfrom store.db import open_db\n"}) == []
