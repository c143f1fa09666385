"""Every third-party package the code imports is declared in pyproject.toml."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
#: Where each kind of import must be declared: the library and pipeline need the main
#: dependencies (and the ``java`` extra, the packaged JDK that spark_env imports only when it is
#: installed); tests may also use the ``test`` extra, benchmarks and research the ``bench`` extra.
PRODUCT = (
    "darkhaloscope",
    "mock_survey",
    "lake_platform",
    "table_registry",
    "lens_assets",
    "resources",
    "io_managers",
    "dhs",
)
SCOPES = {
    (*PRODUCT, "definitions.py"): ("java",),
    ("tests",): ("test",),
    ("benchmarks", "research"): ("test", "bench"),
}
LOCAL = {*PRODUCT, "tests", "definitions", "benchmarks", "research", "docs"}


def _imports(paths) -> dict[str, str]:
    """{top-level module: a file importing it} for the absolute imports under ``paths``."""
    found = {}
    for rel in paths:
        root = REPO / rel
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                )
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extras) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    return {_normalise(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in reqs}


def test_every_imported_package_is_declared():
    dists = packages_distributions()
    undeclared = []
    for paths, extras in SCOPES.items():
        declared = _declared(extras)
        for module, where in _imports(paths).items():
            if module in sys.stdlib_module_names or module in LOCAL:
                continue
            owners = {_normalise(d) for d in dists.get(module, [])}
            assert owners, f"{where} imports {module!r}, which no installed distribution provides"
            if not owners & declared:
                undeclared.append(f"{module} ({'/'.join(sorted(owners))}) imported by {where}")
    assert not undeclared, "imported but not declared in pyproject.toml: " + "; ".join(undeclared)
