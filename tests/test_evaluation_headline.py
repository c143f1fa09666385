"""The headline numbers of the evaluation tables (``evaluation.headline``): AUROCs are
scikit-learn's with the evaluation report's intervals, completeness and recall count the scores
strictly above the fpr=1e-2 threshold of the held-out negatives, the Spearman correlation is
scipy's, and the diagnostic without the hidden lenses sets its threshold on the negatives less
those lenses."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.comparison import auroc_intervals
from darkhaloscope.evaluation.headline import SNR_BINS, headline
from darkhaloscope.evaluation.recall import real_lens_recall
from darkhaloscope.evaluation.scoring import held_out_negatives, injection_rows
from darkhaloscope.evaluation.thresholds import thresholds_from_negatives
from darkhaloscope.seeding import rng_for

THETA_E = (0.5, 1.0, 1.5, 2.0)
GATES = [
    {"name": "core_lr_auc", "value": 0.61234, "passed": True},
    {"name": "hard_negative_auroc", "value": 0.9, "passed": True},
]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _tables(n_hosts: int = 40, n_neg: int = 800, n_real: int = 30):
    """Evaluation tables as the pipeline writes them: each host (N1 or N2, a test-split negative)
    under two injections per θ_E, its controls that host's score repeated; held-out negatives
    (test split, or pool rows outside the training catalog), val negatives of the catalog (not held
    out), test and train known lenses, one unscorable negative and one failed injection."""
    rng = rng_for("test", "headline")
    host_ids = np.arange(1000, 1000 + n_hosts, dtype=np.int64)
    offset = rng.normal(-2.0, 1.0, n_hosts)
    per_host = 2 * len(THETA_E)
    host = np.repeat(host_ids, per_host)
    te = np.tile(np.repeat(THETA_E, 2), n_hosts)
    snr = rng.lognormal(np.log(8.0), 1.0, host.size)
    inj_score = _sigmoid(np.repeat(offset, per_host) + 0.25 * snr + te)
    valid = np.r_[np.ones(host.size, bool), np.ones(host.size, bool)]
    valid[3] = False
    rows = {
        "host_object_id": np.r_[host, host],
        "kind": ["injection"] * host.size + ["control"] * host.size,
        "score": pa.array(np.r_[inj_score, np.repeat(_sigmoid(offset), per_host)], mask=~valid),
        "valid": valid,
        "arc_snr": np.r_[snr, snr],
        "theta_e_arcsec": np.r_[te, te],
        "psf_fwhm_r": np.full(2 * host.size, 1.2),
        "src_mag_r": np.full(2 * host.size, 23.0),
        # every other injection's source beyond the SIS cut (singly imaged)
        "src_beta_frac": np.tile([0.5, 1.1], host.size),
    }
    injections = pa.table(rows)

    neg_ids = np.arange(5000, 5000 + n_neg, dtype=np.int64)
    neg_split = np.where(np.arange(n_neg) % 4 == 0, "val", "test")
    in_catalog = neg_split == "val"  # the val negatives of the catalog chose the epoch: not held out
    real_ids = np.arange(9000, 9000 + n_real + 5, dtype=np.int64)
    cut = {
        "object_id": np.r_[host_ids, neg_ids, real_ids],
        "label": np.r_[np.zeros(n_hosts + n_neg, np.int8), np.ones(n_real + 5, np.int8)],
        "split": np.r_[np.full(n_hosts, "test"), neg_split, np.full(n_real, "test"), np.full(5, "train")],
        "in_training_catalog": np.r_[np.zeros(n_hosts, bool), in_catalog, np.ones(n_real + 5, bool)],
        "pool": np.r_[
            np.where(np.arange(n_hosts) % 3 == 0, "N2", "N1"), np.full(n_neg, "N1"), np.full(n_real + 5, None)
        ],
        "tier": np.r_[np.full(n_hosts + n_neg, None), np.where(np.arange(n_real + 5) % 5 == 0, "A", "B")],
        "score": np.r_[
            _sigmoid(offset), _sigmoid(rng.normal(-2.0, 1.0, n_neg)), _sigmoid(rng.normal(2.0, 1.5, n_real + 5))
        ],
    }
    valid_cut = np.ones(cut["object_id"].size, bool)
    valid_cut[n_hosts + 1] = False
    cutouts = pa.table({**cut, "score": pa.array(cut["score"], mask=~valid_cut), "valid": valid_cut})
    return injections, cutouts


def _published(injections, cutouts, graded=()):
    """(lens_finder, thresholds, real_lens_recall) as the evaluation assets derive them."""
    thresholds = thresholds_from_negatives(held_out_negatives(cutouts, graded))
    real = cutouts.filter(pc.equal(cutouts.column("label"), 1))
    recall = real_lens_recall(real, thresholds, [], split="test")
    metrics = {
        "gates": GATES,
        "best_epoch": 3,
        "epochs_run": 5,
        "calibration": {"ece_before": 0.031, "ece_after": 0.02},
    }
    finder = pa.table({"val_auroc": [0.95123], "metrics": [json.dumps(metrics)]})
    return finder, thresholds, recall


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """scikit-learn's AUROC of ``pos`` (lenses) against ``neg``, to 4 decimals."""
    return round(roc_auc_score(np.r_[np.ones(pos.size), np.zeros(neg.size)], np.r_[pos, neg]), 4)


def _col(table, name):
    return table.column(name).to_numpy(zero_copy_only=False)


def test_the_headline_counts_what_the_evaluation_tables_hold():
    injections, cutouts = _tables()
    finder, thresholds, recall = _published(injections, cutouts)
    h = headline(finder, injections, cutouts, thresholds, recall)
    inj, ctrl = injection_rows(injections, "injection"), injection_rows(injections, "control")
    ok = _col(inj, "valid")
    p, snr, te, host, beta = (
        _col(inj, c)[ok] for c in ("score", "arc_snr", "theta_e_arcsec", "host_object_id", "src_beta_frac")
    )
    ctrl_p = _col(ctrl, "score")
    neg = held_out_negatives(cutouts)
    # the val negatives of the catalog are not held out
    assert neg.num_rows == 40 + 600 and h["n_held_out_negatives"] == 640
    neg_p = _col(neg, "score")[_col(neg, "valid")]
    real_p = _col(cutouts, "score")[40 + 800 : 40 + 800 + 30]  # the test-split known lenses
    assert h["test_auroc_injections_vs_controls"] == auc(p, ctrl_p)
    assert h["test_auroc_injections_snr_ge_5_vs_controls"] == auc(p[snr >= 5], ctrl_p)
    assert h["test_auroc_real_vs_negatives"] == auc(real_p, neg_p)
    real = cutouts.filter(pc.and_(pc.equal(cutouts.column("label"), 1), pc.equal(cutouts.column("split"), "test")))
    intervals = {
        r["comparison"]: [round(r["ci95_lo"], 4), round(r["ci95_hi"], 4)]
        for r in auroc_intervals(inj, ctrl, real, neg).to_pylist()
    }
    assert h["test_auroc_ci95"] == intervals
    # the threshold is the evaluation's fpr=1e-2 row; a score counts when strictly above it
    t = [r["threshold"] for r in thresholds.to_pylist() if r["name"] == "fpr=1e-2"][0]
    assert h["threshold"] == "fpr=1e-2" and h["threshold_value"] == t
    assert np.count_nonzero(neg_p > t) == int(0.01 * neg_p.size)
    for lo, hi in SNR_BINS:
        m = (snr >= lo) & (snr < hi)
        expect = round(np.count_nonzero(p[m] > t) / m.sum(), 3) if m.any() else None
        got, n = h["completeness_by_arc_snr"][f"{lo}-{hi}"]
        assert n == m.sum() and (got == expect or (expect is None and np.isnan(got))), (lo, got, expect)
    assert h["completeness_all"] == round(np.count_nonzero(p > t) / p.size, 3)
    assert h["recall_test_known_lenses"] == [int(np.count_nonzero(real_p > t)), 30]
    multiple = beta < 1.0
    by_te = [np.mean(p[multiple & (te == v)] > t) for v in THETA_E]
    assert h["completeness_by_theta_e"] == {f"{v:.2f}": round(c, 3) for v, c in zip(THETA_E, by_te)}
    assert h["spearman_theta_e"] == round(spearmanr(THETA_E, by_te).statistic, 3)
    wide = te >= 2.0
    assert h["wide_multiply_vs_singly_imaged"] == [
        round(np.mean(p[wide & multiple] > t), 3),
        round(np.mean(p[wide & ~multiple] > t), 3),
    ]
    # every injection host counted once, in its pool; the AUROC on each pool's hosts alone
    pools = h["test_auroc_injections_vs_controls_by_host_pool"]
    assert set(pools) == {"N1", "N2"} and sum(n for _, n in pools.values()) == h["injection_hosts"] == 40
    n2 = np.isin(host, np.arange(1000, 1040)[::3])
    assert pools["N2"][0] == auc(p[n2], ctrl_p[np.isin(_col(ctrl, "host_object_id"), np.arange(1000, 1040)[::3])])
    # resolved arcs: θ_E at least the r-band PSF FWHM (1.2″ here)
    assert sum(n for _, n in h["completeness_by_arc_snr_resolved"].values()) == np.count_nonzero(te >= 1.2)
    assert h["gates"] == {"core_lr_auc": [0.6123, True], "hard_negative_auroc": [0.9, True]}
    assert (h["val_auroc"], h["ece_before_after"], h["best_epoch"], h["epochs_run"]) == (0.9512, [0.031, 0.02], 3, 5)
    assert "without_hidden_lenses" not in h
    json.dumps(h)  # JSON-ready


def test_graded_lenses_leave_the_negatives_and_hidden_lenses_the_diagnostic():
    injections, cutouts = _tables()
    neg = held_out_negatives(cutouts)
    ids, scores = _col(neg, "object_id"), np.nan_to_num(_col(neg, "score"), nan=-1.0)
    top = ids[np.argsort(scores)[::-1][:4]]  # the best-scored negatives: lenses no catalog lists
    finder, thresholds, recall = _published(injections, cutouts, graded=top[:1])
    h = headline(finder, injections, cutouts, thresholds, recall, graded_lenses=top[:1], hidden_lenses=np.r_[top, 1000])
    assert h["n_held_out_negatives"] == neg.num_rows - 1
    w = h["without_hidden_lenses"]
    # the graded one is gone already; the other three and the host 1000 (itself a held-out negative) leave
    assert w["hidden_lenses_among_held_out_negatives"] == 4 and w["hidden_lenses_among_injection_hosts"] == 1
    assert w["threshold_value"] <= h["threshold_value"]
    inj, ctrl = injection_rows(injections, "injection"), injection_rows(injections, "control")
    ok = _col(inj, "valid")
    keep_inj, keep_ctrl = _col(inj, "host_object_id")[ok] != 1000, _col(ctrl, "host_object_id") != 1000
    p, ctrl_p = _col(inj, "score")[ok], _col(ctrl, "score")
    assert w["test_auroc_injections_vs_controls"] == auc(p[keep_inj], ctrl_p[keep_ctrl])


def test_missing_or_unresolvable_inputs_are_named():
    injections, cutouts = _tables()
    finder, thresholds, recall = _published(injections, cutouts)
    other = thresholds.filter(pc.not_equal(thresholds.column("name"), "fpr=1e-2"))
    with pytest.raises(InputError, match=r"thresholds: no row with \{'name': 'fpr=1e-2'\}"):
        headline(finder, injections, cutouts, other, recall)
    few = cutouts.filter(pc.or_(pc.equal(cutouts.column("label"), 1), pc.less(cutouts.column("object_id"), 1060)))
    small_thresholds = thresholds_from_negatives(held_out_negatives(few))
    with pytest.raises(InputError, match="fpr=1e-2 is not resolvable"):
        headline(finder, injections, few, small_thresholds, recall)
    hosts_gone = cutouts.filter(pc.greater_equal(cutouts.column("object_id"), 1040))
    with pytest.raises(InputError, match=r"hosts \[1000, 1001"):
        headline(finder, injections, hosts_gone, thresholds, recall)
    with pytest.raises(InputError, match="lens_finder: the registry table has no row"):
        headline(finder.slice(0, 0), injections, cutouts, thresholds, recall)
