"""The product and its tests stand without ``benchmarks/`` and ``research/``: no module of the
product's packages, ``definitions.py`` or ``tests/`` imports either (docs/architecture.md's layers;
DESIGN: research is never imported by the product or its tests)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Every package of the product, the Dagster definitions and the tests.
CHECKED = (
    "darkhaloscope",
    "lakehouse",
    "table_registry",
    "mock_survey",
    "lens_assets",
    "resources",
    "io_managers",
    "dhs",
    "tests",
    "definitions.py",
)
APART = {"benchmarks", "research"}


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import of ``tree``, and of every ``importlib.import_module``
    or ``__import__`` call with a constant name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def offending_imports(label: str, source: str) -> list[str]:
    """``label:line module`` of each import of :data:`APART` in the Python ``source``."""
    tree = ast.parse(source, filename=label)
    return [f"{label}:{line} {module}" for line, module in imported_modules(tree) if module.split(".")[0] in APART]


def _python_files():
    for name in CHECKED:
        root = REPO / name
        yield from [root] if root.is_file() else sorted(root.rglob("*.py"))


def test_no_product_module_nor_test_imports_benchmarks_or_research():
    files = list(_python_files())
    assert len(files) > 200 and REPO / "dhs" / "demo_summary.py" in files
    bad = [
        hit
        for path in files
        for hit in offending_imports(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"))
    ]
    assert bad == []


def test_the_check_finds_every_form_of_import():
    forms = [
        "import research.common",
        "from benchmarks.bench_cutouts import OUT",
        "import benchmarks as b",
        "importlib.import_module('research.demo_headline')",
        "from lakehouse.lake import Lake",
        "from . import research",
        "import researchers",
    ]
    assert offending_imports("probe.py", "\n".join(forms)) == [
        "probe.py:1 research.common",
        "probe.py:2 benchmarks.bench_cutouts",
        "probe.py:3 benchmarks",
        "probe.py:4 research.demo_headline",
    ]
