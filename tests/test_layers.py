"""Each layer imports only the layers below it (docs/architecture.md, "Layers"), checked on every
module's imports (module level and inside functions)."""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DAGSTER = {"dagster", "dagster_pipes", "dagster_aws", "dagster_pyspark", "dagster_slack"}
DAGSTER_LAYER = {"lens_assets", "resources", "io_managers", "definitions"}
#: layer (its top-level packages or modules) -> the project packages and frameworks it must not import
FORBIDDEN = {
    "science library": (
        {"darkhaloscope"},
        DAGSTER | {"lake_platform", "table_registry", "mock_survey", "dhs"} | DAGSTER_LAYER,
    ),
    "mock survey": ({"mock_survey"}, DAGSTER | {"lake_platform", "table_registry", "dhs"} | DAGSTER_LAYER),
    "lakehouse platform": ({"lake_platform"}, DAGSTER | {"table_registry", "mock_survey", "dhs"} | DAGSTER_LAYER),
    "tables registry": ({"table_registry"}, DAGSTER | {"mock_survey", "dhs"} | DAGSTER_LAYER),
    "Dagster layer": (DAGSTER_LAYER, {"dhs"}),
    # inside the Dagster layer, bottom up: resources < io_managers < lens_assets < definitions
    "resources": ({"resources"}, {"io_managers", "lens_assets", "definitions", "dhs"}),
    "IO managers": ({"io_managers"}, {"lens_assets", "definitions", "dhs"}),
    "assets": ({"lens_assets"}, {"definitions", "dhs"}),
}
PRODUCT_AND_TESTS = {"darkhaloscope", "mock_survey", "lake_platform", "table_registry", "dhs", "tests"} | DAGSTER_LAYER


def _files(packages: set[str]) -> list[pathlib.Path]:
    out = []
    for name in sorted(packages):
        path = REPO / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [REPO / f"{name}.py"]
    return out


def imported_packages(path: pathlib.Path) -> set[str]:
    """Top-level names of every module ``path`` imports (absolute imports; relative ones stay inside
    their package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_the_layers_below_it(layer):
    packages, forbidden = FORBIDDEN[layer]
    offenders = {str(p.relative_to(REPO)): sorted(imported_packages(p) & forbidden) for p in _files(packages)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_neither_the_product_nor_its_tests_import_benchmarks_or_research():
    offenders = {
        str(p.relative_to(REPO)): sorted(imported_packages(p) & {"benchmarks", "research"})
        for p in _files(PRODUCT_AND_TESTS)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from dagster import asset\n    import lake_platform.lake\n")
    assert imported_packages(module) == {"os", "dagster", "lake_platform"}
