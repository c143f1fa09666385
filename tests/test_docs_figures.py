"""``docs/figures.py``: the documentation's figures are the seed-0 demo lake's published figures,
byte for byte; a lake of another realisation is refused and nothing is written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from darkhaloscope.evaluation.products import FIGURES, heatmap_file
from darkhaloscope.survey.manifest import sweep_manifest
from lake_platform.lake import Lake
from table_registry import SELECTION_FUNCTION, SWEEP_FILES

REPO = Path(__file__).resolve().parent.parent


def _figures_module():
    spec = importlib.util.spec_from_file_location("docs_figures", REPO / "docs" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lake(tmp_path, seed: int) -> Lake:
    lake = Lake(str(tmp_path / f"lake-{seed}"))
    origin = {"survey": "mock", "mock_seed": seed, "profile": "demo"}
    lake.write_table(*SWEEP_FILES.key, sweep_manifest(["sweep-030m005-035p000.fits"], [1], origin))
    lake.write_bytes(*SELECTION_FUNCTION.key, heatmap_file("fpr=1e-2"), b"\x89PNG heatmap", partition=FIGURES)
    return lake


def test_the_docs_figure_is_the_seed_0_lakes_own(tmp_path):
    figures = _figures_module()
    out = tmp_path / "static"
    out.mkdir()
    assert figures.main(["--lake", _lake(tmp_path, 0).uri, "--out", str(out)]) == 0
    assert (out / "selection_function_seed0.png").read_bytes() == b"\x89PNG heatmap"
    with pytest.raises(SystemExit, match="the figures are of the seed-0 demo"):
        figures.main(["--lake", _lake(tmp_path, 1).uri, "--out", str(tmp_path)])
    assert not (tmp_path / "selection_function_seed0.png").exists()
    # the page names the command that makes it
    assert "docs/figures.py" in (REPO / "docs" / "results.md").read_text()
