"""No function of the product is longer than :data:`MAX_FUNCTION_LINES` lines (its ``def`` to its
last line, docstring included): a longer one is split into named steps. And no module of the
tables registry outgrows :data:`MAX_REGISTRY_MODULE_LINES` (a stage's tables, contracts and audits)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_dependencies import PRODUCT, REPO

MAX_FUNCTION_LINES = 80
MAX_REGISTRY_MODULE_LINES = 400


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line: name (n lines)`` of every function or method under ``root``'s product packages
    longer than ``limit`` lines."""
    files = [p for package in PRODUCT for p in sorted((root / package).rglob("*.py"))] + [root / "definitions.py"]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.name} ({n} lines)")
    return found


def test_no_function_is_longer_than_the_limit():
    assert long_functions(REPO) == []


def test_the_scan_measures_from_def_to_the_last_line(tmp_path):
    package = tmp_path / PRODUCT[0]
    package.mkdir()
    (tmp_path / "definitions.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(3))
    method = "".join(f"        x{i} = {i}\n" for i in range(3))
    (package / "m.py").write_text(f"def short():\n{body}\n\nclass C:\n    def method(self):\n{method}")
    assert long_functions(tmp_path, limit=4) == []
    assert long_functions(tmp_path, limit=3) == [
        "darkhaloscope/m.py:1: short (4 lines)",
        "darkhaloscope/m.py:8: method (4 lines)",
    ]


def test_no_registry_module_outgrows_the_limit():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (REPO / "table_registry").glob("*.py")}
    assert {k: v for k, v in sizes.items() if v > MAX_REGISTRY_MODULE_LINES} == {}
