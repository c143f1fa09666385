"""docs/architecture.md stays true: its asset graph is generated from the definitions at every
documentation build (tests/test_docs.py checks the built page shows it), and every file it points
a change to exists."""

import importlib.util
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"


def _asset_graph_module():
    spec = importlib.util.spec_from_file_location("asset_graph", REPO / "docs" / "asset_graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_asset_graph_is_generated_not_pasted():
    from definitions import defs

    graph = _asset_graph_module().asset_graph_text(defs)
    assert "catalog     <- survey" in graph and "evaluation_report" in graph
    text = DOC.read_text(encoding="utf-8")
    assert "```{dhs-asset-graph}" in text and "catalog     <- survey" not in text


def test_every_path_the_doc_names_exists():
    text = DOC.read_text(encoding="utf-8")
    paths = {m.split("::")[0] for m in re.findall(r"`([\w./:-]+\.(?:py|md)(?:::\w+)?|[\w-]+/)`", text)}
    assert len(paths) > 15
    missing = sorted(
        p
        for p in paths
        if not p.startswith("_")  # lake folders, not repository paths
        and not (REPO / p).exists()
        and not (REPO / "docs" / p).exists()
    )
    assert missing == []


def test_readme_and_contributing_link_the_architecture_doc():
    for name in ("README.md", "CONTRIBUTING.md"):
        assert "docs/architecture.md" in (REPO / name).read_text(encoding="utf-8"), name
