"""What the UI shows with a materialization: an HTML page's figures as Markdown images (the
report), rows as a table (the gates), and a progress line in the Dagster log and on the console."""

from __future__ import annotations

import logging

import dagster as dg

from lens_assets.shared.progress import report_progress
from lens_assets.shared.publish import GATE_COLUMNS, figures_markdown, rows_table


def test_the_pages_figures_become_markdown_images_and_the_mosaics_are_named():
    page = (
        '<h2>ROC</h2><img id="fig-roc" alt="ROC curves" src="data:image/png;base64,AAA">'
        '<img id="fig-mosaic-missed-injections" alt="missed" src="data:image/png;base64,BBB">'
        '<img alt="no id" src="data:image/png;base64,CCC">'
    )
    md = figures_markdown(page)
    assert isinstance(md, dg.MarkdownMetadataValue)
    assert "**ROC curves**\n\n![fig-roc](data:image/png;base64,AAA)" in md.value
    assert "BBB" not in md.value and "fig-mosaic-missed-injections" in md.value and "CCC" not in md.value


def test_gates_become_a_table_of_their_columns():
    gates = [
        {"name": "core_lr_auc", "value": 0.61, "threshold": 0.7, "passed": True, "blocking": True, "n": 10},
        {"name": "arc_shuffle_auc", "value": None, "threshold": 0.6, "passed": False, "blocking": False},
    ]
    table = rows_table(gates, GATE_COLUMNS)
    assert [c.name for c in table.schema.columns] == ["name", "value", "threshold", "passed", "blocking"]
    assert [r.data for r in table.records][0] == {k: gates[0][k] for k, _ in GATE_COLUMNS}


def test_a_progress_line_goes_to_the_log_and_to_stderr(capsys, caplog):
    log = logging.getLogger("dhs-test-progress")
    with caplog.at_level(logging.INFO, logger="dhs-test-progress"):
        report_progress(log, "search sweep-a: chunk 2/5 scored")
    assert "search sweep-a: chunk 2/5 scored" in caplog.text
    assert capsys.readouterr().err == "search sweep-a: chunk 2/5 scored\n"
