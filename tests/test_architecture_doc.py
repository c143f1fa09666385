"""docs/architecture.md stays true: its asset graph is the one the definitions build, and every
file it points a change to exists."""

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


def test_the_pasted_asset_graph_matches_the_definitions():
    from definitions import defs

    mod = _asset_graph_module()
    text = DOC.read_text(encoding="utf-8")
    graph = mod.asset_graph_text(defs)
    assert "catalog     <- survey" in graph and "evaluation_report" in graph
    assert mod.replace_block(text, graph) == text, (
        "docs/architecture.md shows an outdated asset graph: run `.venv/bin/python docs/asset_graph.py --write`"
    )


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
