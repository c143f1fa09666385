"""The static HTML evaluation report: structure, determinism, and every figure loading in Chromium."""

from __future__ import annotations

import re
import struct
from html.parser import HTMLParser

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import (
    build_report,
    example_ids,
    fpr_by_confuser,
    marginal_completeness,
    marginal_png,
    mosaic_png,
    real_lens_recall,
    roc_inputs,
    roc_png,
    selection_function,
    selection_heatmap_png,
    thresholds_from_negatives,
)
from darkhaloscope.evaluation.comparison import auroc_intervals
from darkhaloscope.evaluation.plots import ablation_png, reliability_png
from darkhaloscope.evaluation.realism import realism_row, realism_table
from darkhaloscope.evaluation.report import ablation_page
from darkhaloscope.seeding import rng_for
from darkhaloscope.training.calibration import calibration_summary, fit_temperature
from tests.conftest import require_chromium
from tests.support.chromium import SENTINEL, image_load_results


def _inputs():
    rng = rng_for("test", "report")
    n_neg, n_inj = 3000, 600
    neg = pa.table(
        {
            "object_id": np.arange(n_neg, dtype=np.int64),
            "score": rng.beta(1, 30, n_neg).astype(np.float32),
            "valid": np.ones(n_neg, dtype=bool),
            "split": ["val"] * n_neg,
            "pool": np.where(np.arange(n_neg) % 4 == 0, "N2", "N1"),
            "confuser_category": [("ring" if i % 8 == 0 else "spiral") if i % 4 == 0 else None for i in range(n_neg)],
        }
    )
    te = rng.choice([0.5, 1.0, 1.5, 2.0], n_inj)
    zl = rng.choice([0.3, 0.5, 0.7], n_inj)
    p = 1.0 / (1.0 + np.exp(-(4.0 * (te - 1.2) + rng.standard_normal(n_inj))))
    success = rng.random(n_inj) > 0.03
    inj = pa.table(
        {
            "injection_id": np.arange(n_inj, dtype=np.int64),
            "theta_e_arcsec": te,
            "z_l": zl,
            "success": success,
            "score": pa.array(p.astype(np.float32), mask=~success),
            "valid": success,
            "arc_snr": rng.gamma(2.0, 8.0, n_inj),
            "psf_fwhm_r": rng.uniform(0.9, 1.8, n_inj),
        }
    )
    host = np.arange(n_inj, dtype=np.int64) // 6  # a host under six injections, as the bank reuses hosts
    inj = inj.append_column("host_object_id", pa.array(host))
    ctrl = pa.table(
        {
            "injection_id": inj.column("injection_id"),
            "score": rng.beta(1, 30, n_inj // 6).astype(np.float32)[host],  # one score per host
            "valid": np.ones(n_inj, dtype=bool),
            "host_object_id": host,
        }
    )
    real = pa.table(
        {
            "object_id": np.arange(10_000, 10_040, dtype=np.int64),
            "name": [f"J{i:04d}" for i in range(40)],
            "tier": ["A"] * 15 + ["B"] * 25,
            "split": ["test"] * 40,
            "score": rng.beta(5, 2, 40).astype(np.float32),
            "valid": np.ones(40, dtype=bool),
        }
    )
    return neg, inj, ctrl, real


def _report() -> tuple[str, dict[str, bytes]]:
    neg, inj, ctrl, real = _inputs()
    thr = thresholds_from_negatives(neg, target_fprs=(1e-2, 1e-3), top_percentiles=(0.01,), n_boot=20)
    sel = selection_function(inj, thr, theta_e_centres=[0.5, 1.0, 1.5, 2.0], z_l_centres=[0.3, 0.5, 0.7], min_count=40)
    marg = marginal_completeness(inj, thr, "psf_fwhm_r", edges=[0.9, 1.2, 1.5, 1.8])
    figs = {
        "heatmap": selection_heatmap_png(sel, "fpr=1e-2"),
        "marginal": marginal_png(marg, xlabel="PSF FWHM r (arcsec)"),
        "roc": roc_png(
            {"injections vs controls": roc_inputs(inj, ctrl), "real lenses vs negatives": roc_inputs(real, neg)},
            fpr_marks=(1e-2, 1e-3),
        ),
    }
    # an over-confident validation set: temperature scaling must soften it
    labels = np.arange(400) % 2
    logits = 4.0 * (labels - 0.5) + rng_for("test", "report", "logits").normal(0.0, 3.0, 400)
    calibration = calibration_summary(logits, labels, fit_temperature(logits, labels))
    figs["reliability"] = reliability_png(calibration)
    stamps = rng_for("test", "report", "stamps").normal(0.0, 0.02, (18, 3, 31, 31)).astype(np.float32)
    stamps[:, :, 13:18, 13:18] += 0.5
    ex = example_ids(inj, neg, threshold=thr.column("threshold")[0].as_py(), n=6)
    for i, (label, ids) in enumerate(ex.items()):
        figs[label] = mosaic_png(stamps[6 * i : 6 * i + len(ids)], captions=[str(x) for x in ids], ncols=6)
    page = build_report(
        roc=figs["roc"],
        aurocs=auroc_intervals(inj, ctrl, real, neg, n_boot=50),
        thresholds=thr,
        selection=sel,
        selection_heatmaps={"fpr=1e-2": figs["heatmap"]},
        marginals={"PSF FWHM r": (figs["marginal"], marg)},
        recall=real_lens_recall(real, thr, training_object_ids=[1, 2, 3]),
        fpr_by_confuser=fpr_by_confuser(neg, thr),
        gates=[
            {"name": "tier-A recall at fpr=1e-3", "value": 0.8, "threshold": 0.75, "passed": True},
            {"name": "AUC injections vs controls", "value": 0.97, "threshold": 0.98, "passed": False},
        ],
        validation={
            "val_auroc": 0.9645,
            "val_auroc_injections_vs_negatives": 0.951,
            "val_auroc_real_vs_negatives": 0.99,
            "best_epoch": 19,
            "epochs_run": 28,
        },
        calibration={**calibration, "dihedral_views": 2},
        conditioning={"grid": {"theta_e_arcsec": [0.5, 2.0], "z_l": [0.3, 0.7]}, "injections_per_cell": 40},
        reliability=figs["reliability"],
        mosaics={k: figs[k] for k in ex},
        provenance={"model": "test-model", "code_version": "0"},
        realism=realism_table([realism_row("mock known lenses vs injections", None, 3, 3, ["theta_e_arcsec"])]),
        ablation_uri="../realism_ablation.files/ablation.html",
    )
    return page, figs


def _ablation_table() -> pa.Table:
    """A synthetic realism ablation: the baseline arm and two others (one without a probe AUROC)."""
    return pa.table(
        {
            "arm": ["sersic", "cosmos", "sersic_psf"],
            "auroc_truth": [0.91, 0.95, 0.90],
            "recall_truth": [0.40, 0.55, 0.38],
            "probe_auroc": [0.80, 0.62, None],
            "delta_c": [0.0, 0.05, -0.01],
            "delta_c_sd": [0.0, 0.02, 0.015],
            "baseline_arm": ["sersic", "sersic", "sersic"],
        }
    )


@pytest.fixture(scope="module")
def report():
    return _report()


class _Imgs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs: list[dict] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "img":
            self.imgs.append(a)


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_report_structure(report):
    page, figs = report
    parser = _Imgs()
    parser.feed(page)
    assert len(parser.imgs) == 1 + 1 + 1 + 1 + 3  # reliability, roc, heatmap, marginal, three mosaics
    for img in parser.imgs:
        assert img.get("id") and img.get("alt"), img.get("id")
        assert img["src"].startswith("data:image/png;base64,")
    assert len(parser.ids) == len(set(parser.ids))
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # self-contained
    for el in (
        "table-thresholds",
        "table-recall",
        "table-selection",
        "table-gates",
        "table-fpr-by-confuser",
        "fig-roc",
        "table-aurocs",
        "fig-selection-fpr-1e-2",
        "table-calibration",
        "fig-reliability",
        "table-realism-probe",
        "link-realism-ablation",
    ):
        assert f'id="{el}"' in page
    assert "1 of 2 gates passed" in page and "FAIL" in page
    # every section given is rendered; those not given here (the populations, the detection model,
    # the forecast) are the ones marked missing
    assert page.count("Not provided") == 3
    for section in ("C for a population", "The detection model", "Forecast"):
        assert re.search(section + r"[^<]*</h2>\s*<p class=\"missing\">Not provided", page), section
    assert 'id="table-conditioning"' in page
    assert "the logit is the mean over the stamp and its 180° rotation" in page
    assert '<th>validation AUROC</th><td class="s">0.9645</td>' in page and "the published epoch, 19 of 28" in page


def test_figures_and_page_are_byte_stable(report):
    page, figs = report
    page2, figs2 = _report()
    assert page == page2
    for k in figs:
        assert figs[k] == figs2[k], k
        assert b"matplotlib" not in figs[k].lower()  # no Software/version chunk


def test_missing_sections_are_visible_and_bad_gates_refused():
    page = build_report()
    assert page.count("Not provided") >= 6
    assert "not part of the demo; <code>dhs materialize realism_ablation</code>" in page
    with pytest.raises(InputError, match="passed"):
        build_report(gates=[{"name": "g", "value": 1, "threshold": 2}])
    with pytest.raises(InputError, match="PNG"):
        build_report(roc=b"not a png")


def test_every_figure_loads_in_headless_chromium(report, tmp_path):
    require_chromium()
    page, figs = report
    result = image_load_results(page, tmp_path)
    # the sentinel proves the check can fail: a broken image has naturalWidth 0
    assert result.pop(SENTINEL)["w"] == 0
    expected = {
        "fig-roc": figs["roc"],
        "fig-selection-fpr-1e-2": figs["heatmap"],
        "fig-reliability": figs["reliability"],
        "fig-marginal-psf-fwhm-r": figs["marginal"],
        "fig-mosaic-true-positives": figs["true positives"],
        "fig-mosaic-missed-injections": figs["missed injections"],
        "fig-mosaic-highest-scoring-negatives": figs["highest-scoring negatives"],
    }
    assert set(result) == set(expected)
    for el_id, png in expected.items():
        r = result[el_id]
        assert r["complete"] and r["alt"], el_id
        assert (r["w"], r["h"]) == _png_size(png), el_id


def test_the_ablation_page_shows_its_arms_and_its_figure_loads_in_headless_chromium(tmp_path):
    require_chromium()
    table = _ablation_table()
    png = ablation_png(table)
    page = ablation_page(table, png)
    assert page == ablation_page(table, png)  # byte-stable
    assert 'id="table-realism-ablation"' in page and all(arm in page for arm in table.column("arm").to_pylist())
    result = image_load_results(page, tmp_path)
    assert result.pop(SENTINEL)["w"] == 0
    assert set(result) == {"fig-realism-ablation"}
    r = result["fig-realism-ablation"]
    assert r["complete"] and r["alt"] and (r["w"], r["h"]) == _png_size(png)
